import sys

from pagecast.cli import main

sys.exit(main())
