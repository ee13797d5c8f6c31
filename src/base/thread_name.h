// Names for chorus's own threads, as `ps -L`, top, gdb and /proc/<pid>/task/<tid>/comm show them
// (Linux keeps 15 characters).
#pragma once

#include <pthread.h>

namespace chorus {

/// Names the calling thread; a name the kernel refuses (too long) leaves the old one.
inline void nameThisThread(const char* name) { pthread_setname_np(pthread_self(), name); }

}  // namespace chorus
