/* userfaultfd names newer than some distributions' kernel headers: the page-set shim and
 * the collector's probe of it both need them (values from linux/userfaultfd.h, 6.7+). */
#ifndef PAGECAST_UFFD_COMPAT_H
#define PAGECAST_UFFD_COMPAT_H

#include <linux/userfaultfd.h>

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif

#endif
