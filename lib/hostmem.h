/*
 * hostmem.h - the memory this machine has left, for the library's checks
 * before it allocates more than a machine may hold (the synthetic
 * generator's tables, train-step's experts): an error naming the need
 * beats the kernel's out-of-memory killer.  Internal.
 */
#ifndef RLB_HOSTMEM_H
#define RLB_HOSTMEM_H

/*
 * Memory this process may still fill: MemAvailable of /proc/meminfo (free
 * memory plus what the kernel can reclaim), else the machine's total; 0
 * when neither is known.  *what says which ("available", "in all").
 */
double rlb_host_mem_available(const char **what);

#endif
