/*
 * Force-included (-include) into every libvgpu.so translation unit: binds each glibc reference
 * to a version that glibc 2.17 (aarch64) / 2.2.5 (x86-64) already had, so the library loads in
 * old images (RHEL 8 / UBI 8 = glibc 2.28, Ubuntu 18.04 = 2.27) as well as new ones.
 *
 * - dl* and pthread_* moved into libc.so.6 in glibc 2.34 under a new version GLIBC_2.34; the
 *   old versions stay in it as compatibility symbols. A reference bound to an old version is
 *   recorded against libc.so.6, but the dynamic linker matches a versioned reference by version
 *   name in every object of the lookup scope, so on an old glibc it is found in libdl.so.2 /
 *   libpthread.so.0. The Makefile keeps both as DT_NEEDED so they are in that scope.
 * - pthread_sigmask moved into libc.so.6 in 2.32 (GLIBC_2.32); bound to its old version too.
 * - fstat/stat/lstat are exported only since 2.33 (before, inline wrappers around __fxstat in
 *   libc_nonshared.a): replaced by the system calls, whose struct stat is glibc's on x86-64 and
 *   aarch64 (glibc >= 2.33 calls the same ones).
 *
 * Never bind a function whose old version has different behaviour (pthread_cond_* before 2.3.2
 * is the old condition-variable ABI): only the names below, each checked. tests/run.sh fails
 * when libvgpu.so references any GLIBC_x.y newer than 2.28, so a new name shows up there.
 */
#ifndef VGPU_GLIBC_COMPAT_H
#define VGPU_GLIBC_COMPAT_H

#if defined(__x86_64__)
#define VGPU_GLIBC_BASE "GLIBC_2.2.5"
#define VGPU_GLIBC_ROBUST "GLIBC_2.12" /* robust mutexes came in 2.12 on x86-64 */
#elif defined(__aarch64__)
#define VGPU_GLIBC_BASE "GLIBC_2.17" /* the first aarch64 glibc */
#define VGPU_GLIBC_ROBUST "GLIBC_2.17"
#else
#error "libvgpu: glibc_compat.h knows the glibc baselines of x86-64 and aarch64 only"
#endif

#ifndef __ASSEMBLER__

#define VGPU_SYMVER(name, version) __asm__(".symver " #name "," #name "@" version);

/* libdl, merged into libc in 2.34 */
VGPU_SYMVER(dlopen, VGPU_GLIBC_BASE)
VGPU_SYMVER(dlclose, VGPU_GLIBC_BASE)
VGPU_SYMVER(dlerror, VGPU_GLIBC_BASE)
VGPU_SYMVER(dlvsym, VGPU_GLIBC_BASE)
VGPU_SYMVER(dladdr, VGPU_GLIBC_BASE)
/* libpthread, merged into libc in 2.34 (pthread_sigmask in 2.32) */
VGPU_SYMVER(pthread_create, VGPU_GLIBC_BASE)
VGPU_SYMVER(pthread_join, VGPU_GLIBC_BASE)
VGPU_SYMVER(pthread_detach, VGPU_GLIBC_BASE)
VGPU_SYMVER(pthread_kill, VGPU_GLIBC_BASE)
VGPU_SYMVER(pthread_once, VGPU_GLIBC_BASE)
VGPU_SYMVER(pthread_sigmask, VGPU_GLIBC_BASE)
VGPU_SYMVER(pthread_key_create, VGPU_GLIBC_BASE)
VGPU_SYMVER(pthread_getspecific, VGPU_GLIBC_BASE)
VGPU_SYMVER(pthread_setspecific, VGPU_GLIBC_BASE)
VGPU_SYMVER(pthread_mutexattr_init, VGPU_GLIBC_BASE)
VGPU_SYMVER(pthread_mutexattr_destroy, VGPU_GLIBC_BASE)
VGPU_SYMVER(pthread_mutexattr_settype, VGPU_GLIBC_BASE)
VGPU_SYMVER(pthread_mutexattr_setpshared, VGPU_GLIBC_BASE)
VGPU_SYMVER(pthread_mutexattr_setrobust, VGPU_GLIBC_ROBUST)
VGPU_SYMVER(pthread_mutex_consistent, VGPU_GLIBC_ROBUST)

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline int vgpu_compat_fstat(int fd, struct stat *st)
{
	return (int)syscall(SYS_fstat, fd, st);
}
static inline int vgpu_compat_stat(const char *path, struct stat *st)
{
	return (int)syscall(SYS_newfstatat, AT_FDCWD, path, st, 0);
}
static inline int vgpu_compat_lstat(const char *path, struct stat *st)
{
	return (int)syscall(SYS_newfstatat, AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
}
#define fstat(fd, st) vgpu_compat_fstat(fd, st)
#define stat(path, st) vgpu_compat_stat(path, st)
#define lstat(path, st) vgpu_compat_lstat(path, st)

#endif /* __ASSEMBLER__ */
#endif
