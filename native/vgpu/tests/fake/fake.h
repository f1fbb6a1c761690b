/*
 * The fake driver: libcuda.so.1 and libnvidia-ml.so.1 over host memory, for tests without a GPU.
 * Configured by environment variables (read once per process):
 *   FAKE_CUDA_DEVICES        device count (default 1)
 *   NVIDIA_VISIBLE_DEVICES   when every entry is a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-
 *                            xxxxxxxxxxxx), the devices are those, in that order, as the container
 *                            runtime would expose them (count and UUIDs; FAKE_CUDA_DEVICES is
 *                            then ignored). Otherwise device i's UUID is
 *                            GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeXX with XX = i in hex.
 *                            `void` (what NVIDIA's DRA driver's CDI spec sets: the container
 *                            gets its cards only as device nodes): the devices are the char
 *                            nodes /dev/nvidia<N> present (N 0..FAKE_MAX_DEVICES-1, ascending;
 *                            FAKE_CUDA_DEVICES ignored), as the real driver sees the nodes the
 *                            runtime injected; device i's minor number is its N and its UUID
 *                            the rule above with XX = N
 *   CUDA_VISIBLE_DEVICES     honoured (indices, as the real driver takes them): selects and
 *                            reorders devices for CUDA (ordinal i is the i-th listed), not for NVML
 *   FAKE_CUDA_MEMORY         bytes per device, suffixes K/M/G (default 16G)
 *   FAKE_CUDA_SM_COUNT       multiprocessors per device (default 132)
 *   FAKE_CUDA_KERNEL_US      simulated busy time of one kernel launch, µs (default 0)
 *   FAKE_CUDA_GRAPH_KERNELS  kernels in one graph launch (default 4)
 *   FAKE_CUDA_QUEUE          launch queue depth before launches block (default 64)
 *   FAKE_CUDA_GRANULARITY    allocation granularity (default 2M)
 *   FAKE_CUDA_FAST_ALLOC     1: allocations are addresses only, no memory (benchmarks)
 *   FAKE_CUDA_PROC_INTERNAL  1: cuGetProcAddress hands out internal entry points, not exports
 *   FAKE_GPU_STATE           a file: every process naming it shares one device (kernel queue,
 *                            busy time per pid for NVML, physical memory in use)
 *   FAKE_HOST_PROC           the host's /proc, for a process with a /proc of its own pid namespace:
 *                            where its host pid (NVML's and the busy time's pid) is read from
 *   FAKE_NVML_UTIL           force nvmlDeviceGetUtilizationRates/ProcessUtilization to this %
 *   FAKE_NVML_NO_PROCESS_UTIL 1: nvmlDeviceGetProcessUtilization is not supported
 *   FAKE_NVML_WINDOW_MS      utilisation sampling window (default 100)
 *   FAKE_NVML_MIG_MODES      comma list of 0/1, one per device in NVML index order: 1 = MIG mode
 *                            enabled (nvmlDeviceGetMigMode; missing entries = 0)
 *   FAKE_NVML_DRIVER_VERSION what nvmlSystemGetDriverVersion answers (default
 *                            FAKE_DRIVER_VERSION; the Makefile names the mock-driver layout's
 *                            files with it)
 *   FAKE_NVML_NAME           every device's product name (default "NVIDIA Fake GPU")
 * The fake NVML also answers what the node agent asks through pynvml (nvmlInitWithFlags, minor
 * number = index, compute capability 9.0, Hopper, an event set where no event ever arrives).
 * Device memory is reserved address space (mmap, MAP_NORESERVE): usable, cheap until touched.
 * Without FAKE_GPU_STATE the device is private to the process.
 */
#ifndef FAKE_H
#define FAKE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "abi.h"

#define FAKE_MAX_DEVICES 16
#define FAKE_DRIVER_VERSION "570.124.06" /* one line: the Makefile reads it */

static inline uint64_t fake_env_bytes(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);
	char *end;
	uint64_t n;

	if (v == NULL || *v == '\0')
		return dflt;
	n = strtoull(v, &end, 10);
	switch (*end) {
	case 'K': case 'k': n <<= 10; break;
	case 'M': case 'm': n <<= 20; break;
	case 'G': case 'g': n <<= 30; break;
	default: break;
	}
	return n;
}

/* The GPU UUIDs NVIDIA_VISIBLE_DEVICES lists, into out[] (at most FAKE_MAX_DEVICES); their
 * count, or 0 when it is unset, empty, or any entry is not a UUID ("all", indices). */
static inline int fake_listed_uuids(unsigned char out[][16])
{
	const char *p = getenv("NVIDIA_VISIBLE_DEVICES");
	static const char shape[] = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
	int n = 0;

	while (p && *p && n < FAKE_MAX_DEVICES) {
		int nib = 0;
		for (size_t i = 0; i < sizeof(shape) - 1; i++, p++) {
			unsigned int v;
			if (shape[i] != 'x') {
				if (*p != shape[i])
					return 0;
				continue;
			}
			if (*p >= '0' && *p <= '9')
				v = (unsigned int)(*p - '0');
			else if ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'f')
				v = (unsigned int)((*p | 0x20) - 'a' + 10);
			else
				return 0;
			out[n][nib / 2] = (unsigned char)(nib % 2 ? out[n][nib / 2] | v : v << 4);
			nib++;
		}
		n++;
		if (*p == ',')
			p++;
		else if (*p != '\0')
			return 0;
	}
	return p && *p == '\0' ? n : 0;
}

/* Under NVIDIA_VISIBLE_DEVICES=void: the minors N of the char nodes /dev/nvidia<N> present,
 * ascending, into out[]; their count (0 for none). -1 when NVIDIA_VISIBLE_DEVICES is not void. */
static inline int fake_void_minors(int out[FAKE_MAX_DEVICES])
{
	const char *v = getenv("NVIDIA_VISIBLE_DEVICES");
	char path[32];
	struct stat st;
	int n = 0;

	if (v == NULL || strcmp(v, "void") != 0)
		return -1;
	for (int minor = 0; minor < FAKE_MAX_DEVICES; minor++) {
		snprintf(path, sizeof(path), "/dev/nvidia%d", minor);
		if (stat(path, &st) == 0 && S_ISCHR(st.st_mode))
			out[n++] = minor;
	}
	return n;
}

/* Physical device `index`'s minor number: its /dev/nvidia<N> under void, else the index. */
static inline int fake_minor(int index)
{
	int minors[FAKE_MAX_DEVICES];
	int n = fake_void_minors(minors);

	return index >= 0 && index < n ? minors[index] : index;
}

/* Physical device `index`'s UUID bytes (see the header). */
static inline void fake_uuid_bytes(int index, unsigned char b[16])
{
	unsigned char listed[FAKE_MAX_DEVICES][16];

	if (index < fake_listed_uuids(listed)) {
		memcpy(b, listed[index], 16);
		return;
	}
	for (int i = 0; i < 16; i++)
		b[i] = (unsigned char)(0xa0 + i);
	b[15] = (unsigned char)fake_minor(index);
}

/* How many physical devices there are (what NVML shows). */
static inline int fake_device_count(void)
{
	unsigned char listed[FAKE_MAX_DEVICES][16];
	int minors[FAKE_MAX_DEVICES];
	int n = fake_listed_uuids(listed);
	int cards = fake_void_minors(minors);
	uint64_t env = fake_env_bytes("FAKE_CUDA_DEVICES", 1);

	if (n > 0)
		return n;
	if (cards >= 0)
		return cards;
	return env > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : (int)env;
}

/* What NVML calls a process: its host pid, the outermost NStgid entry (cached per process). The
 * real driver knows it even for a process in a pid namespace with its own /proc, which shows
 * only the inner pid: there FAKE_HOST_PROC names the host's /proc as the process can still reach
 * it (e.g. /proc/self/fd/N of a descriptor opened before unshare), whose "self" is the process
 * seen from the host. */
static inline uint32_t fake_host_pid(void)
{
	static pid_t cached_for;
	static uint32_t host;
	const char *host_proc = getenv("FAKE_HOST_PROC");
	char line[256];
	FILE *f;

	if (cached_for == getpid())
		return host;
	host = (uint32_t)getpid();
	snprintf(line, sizeof(line), "%s/self/status", host_proc && *host_proc ? host_proc : "/proc");
	if ((f = fopen(line, "r")) != NULL) {
		while (fgets(line, sizeof(line), f))
			if (strncmp(line, "NStgid:", 7) == 0)
				host = (uint32_t)strtoul(line + 7, NULL, 10);
		fclose(f);
	}
	cached_for = getpid();
	return host;
}

/* Exported by the fake libcuda for the fake NVML and for tests. */
uint64_t fake_cuda_memory_used(int dev);
unsigned long fake_cuda_graph_trims(int dev);
uint64_t fake_cuda_memory_total(void);
int fake_cuda_device_count(void);
/* Busy nanoseconds of device `dev` within the last `window_ns`, and the total since start. */
uint64_t fake_cuda_busy_ns(int dev, uint64_t window_ns);
uint64_t fake_cuda_busy_ns_pid(int dev, uint64_t window_ns, uint32_t pid);
int fake_cuda_active_pids(int dev, uint64_t window_ns, uint32_t *out, int max);
uint64_t fake_cuda_busy_total_ns(int dev);
uint64_t fake_cuda_launches(int dev);
uint64_t fake_now_ns(void);

#endif
