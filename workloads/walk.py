import mmap, random, sys
with open(sys.argv[1], "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    n = len(m) // 4096
    s = 0
    for i in range(0, n, 3):                 # strided pass
        s += m[i * 4096]
    for i in range(0, n, 1):                 # sequential pass
        s += m[i * 4096]
    rnd = random.Random(1)
    for _ in range(2000):                    # random probes
        s += m[rnd.randrange(n) * 4096]
print(s)
