/* Fake libnvidia-ml.so.1 (see fake.h): devices, memory and utilisation from the fake libcuda. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake.h"

#define EXPORT __attribute__((visibility("default")))
#ifdef VGPU_GLIBC_BASE /* built with src/glibc_compat.h (the mock-driver layout): dlsym as well */
VGPU_SYMVER(dlsym, VGPU_GLIBC_BASE)
#endif

struct nvmlDevice_st {
	unsigned int index;
};
static struct nvmlDevice_st handles[FAKE_MAX_DEVICES];
static int initialised;

/* The fake libcuda's state, if this process loaded it. */
static void *cuda_fn(const char *name)
{
	return dlsym(RTLD_DEFAULT, name);
}

static int ndev(void)
{
	int (*count)(void) = (int (*)(void))cuda_fn("fake_cuda_device_count");
	return count ? count() : fake_device_count();
}

static int valid(nvmlDevice_t d)
{
	return initialised && d >= handles && d < handles + ndev();
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
	for (unsigned int i = 0; i < FAKE_MAX_DEVICES; i++)
		handles[i].index = i;
	initialised = 1;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit(void)
{
	return nvmlInit_v2();
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = (unsigned int)ndev();
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (device == NULL || index >= (unsigned int)ndev())
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &handles[index];
	return NVML_SUCCESS;
}

static void format_uuid(unsigned int index, char *buf, size_t len)
{
	unsigned char b[16];

	fake_uuid_bytes((int)index, b);
	snprintf(buf, len,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
		 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
		 b[14], b[15]);
}

static unsigned long uuid_reads; /* nvmlDeviceGetUUID calls, for tests that count them */

EXPORT unsigned long fake_nvml_uuid_reads(void)
{
	return __atomic_load_n(&uuid_reads, __ATOMIC_RELAXED);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE];

	__atomic_fetch_add(&uuid_reads, 1, __ATOMIC_RELAXED);
	if (!valid(device) || uuid == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	format_uuid(device->index, buf, sizeof(buf));
	if (strlen(buf) + 1 > length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(uuid, buf, strlen(buf) + 1);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
	char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE];

	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (uuid == NULL || device == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < ndev(); i++) {
		format_uuid((unsigned int)i, buf, sizeof(buf));
		if (strcmp(buf, uuid) == 0) {
			*device = &handles[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
	if (!valid(device) || index == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*index = device->index;
	return NVML_SUCCESS;
}

static uint64_t used_of(unsigned int index)
{
	uint64_t (*used)(int) = (uint64_t(*)(int))cuda_fn("fake_cuda_memory_used");
	return used ? used((int)index) : 0;
}

static uint64_t total_mem(void)
{
	return fake_env_bytes("FAKE_CUDA_MEMORY", 16ULL << 30);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	if (!valid(device) || memory == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	memory->total = total_mem();
	memory->used = used_of(device->index);
	memory->free = memory->total - memory->used;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	if (!valid(device) || memory == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (memory->version != nvmlMemory_v2)
		return NVML_ERROR_INVALID_ARGUMENT; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH really */
	memory->total = total_mem();
	memory->reserved = 64ULL << 20;
	memory->used = used_of(device->index);
	memory->free = memory->total - memory->reserved - memory->used;
	return NVML_SUCCESS;
}

static unsigned int util_of(unsigned int index)
{
	uint64_t (*busy)(int, uint64_t) = (uint64_t(*)(int, uint64_t))cuda_fn("fake_cuda_busy_ns");
	uint64_t window = fake_env_bytes("FAKE_NVML_WINDOW_MS", 100) * 1000000ULL;
	const char *forced = getenv("FAKE_NVML_UTIL");

	if (forced && *forced)
		return (unsigned int)atoi(forced);
	if (busy == NULL || window == 0)
		return 0;
	return (unsigned int)((busy((int)index, window) * 100 + window / 2) / window);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u)
{
	if (!valid(device) || u == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	u->gpu = util_of(device->index);
	u->memory = 0;
	return NVML_SUCCESS;
}

/* One sample per process that kept the device busy in the window, under its host pid. */
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
						    nvmlProcessUtilizationSample_t *samples,
						    unsigned int *count, unsigned long long last_seen)
{
	uint64_t (*busy)(int, uint64_t, uint32_t) =
		(uint64_t(*)(int, uint64_t, uint32_t))cuda_fn("fake_cuda_busy_ns_pid");
	int (*active)(int, uint64_t, uint32_t *, int) =
		(int (*)(int, uint64_t, uint32_t *, int))cuda_fn("fake_cuda_active_pids");
	uint64_t window = fake_env_bytes("FAKE_NVML_WINDOW_MS", 100) * 1000000ULL;
	const char *forced = getenv("FAKE_NVML_UTIL");
	uint32_t pids[64];
	struct timespec ts;
	int n = 0;

	if (fake_env_bytes("FAKE_NVML_NO_PROCESS_UTIL", 0))
		return NVML_ERROR_NOT_SUPPORTED;
	if (!valid(device) || count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (forced && *forced) {
		pids[0] = fake_host_pid();
		n = 1;
	} else if (busy && active && window) {
		n = active((int)device->index, window, pids, 64);
	}
	if (n == 0)
		return NVML_ERROR_NOT_FOUND;
	if (samples == NULL || *count < (unsigned int)n) {
		*count = (unsigned int)n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	for (int i = 0; i < n; i++) {
		memset(&samples[i], 0, sizeof(samples[i]));
		samples[i].pid = pids[i];
		samples[i].timeStamp = (unsigned long long)ts.tv_sec * 1000000ULL +
				       (unsigned long long)ts.tv_nsec / 1000;
		samples[i].smUtil = forced && *forced ? (unsigned int)atoi(forced)
				    : (unsigned int)((busy((int)device->index, window, pids[i]) * 100 +
						       window / 2) / window);
	}
	*count = (unsigned int)n;
	return NVML_SUCCESS;
}

/* ---- What the node agent asks at start (pynvml) and in its health watcher ---- */

#define FAKE_NVML_TIMEOUT 10 /* NVML_ERROR_TIMEOUT: no event arrived */
#define FAKE_NVML_ARCH_HOPPER 9

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	(void)flags;
	return nvmlInit_v2();
}

static nvmlReturn_t copy_text(const char *text, char *out, unsigned int length)
{
	if (out == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(text) + 1 > length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(out, text, strlen(text) + 1);
	return NVML_SUCCESS;
}

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	return copy_text(env_or("FAKE_NVML_DRIVER_VERSION", FAKE_DRIVER_VERSION), version, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	if (!valid(device))
		return NVML_ERROR_INVALID_ARGUMENT;
	return copy_text(env_or("FAKE_NVML_NAME", "NVIDIA Fake GPU"), name, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
	if (!valid(device) || minor == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*minor = (unsigned int)fake_minor((int)device->index);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
	if (!valid(device) || major == NULL || minor == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*major = 9;
	*minor = 0;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch)
{
	if (!valid(device) || arch == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*arch = FAKE_NVML_ARCH_HOPPER;
	return NVML_SUCCESS;
}

/* FAKE_NVML_MIG_MODES: device i's entry of the comma list, 1 = MIG enabled (missing = 0). */
static unsigned int mig_mode_of(unsigned int index)
{
	const char *p = getenv("FAKE_NVML_MIG_MODES");

	for (unsigned int i = 0; p && *p; i++) {
		if (i == index)
			return *p == '1';
		p = strchr(p, ',');
		p = p ? p + 1 : NULL;
	}
	return 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current,
					 unsigned int *pending)
{
	if (!valid(device) || current == NULL || pending == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*current = *pending = mig_mode_of(device->index);
	return NVML_SUCCESS;
}

/* Events: one set, registration accepted, and nothing ever arrives (no XID on a fake card). */
struct nvmlEventSet_st {
	int unused;
};
static struct nvmlEventSet_st event_set;

EXPORT nvmlReturn_t nvmlEventSetCreate(struct nvmlEventSet_st **set)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (set == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*set = &event_set;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
					     struct nvmlEventSet_st *set)
{
	(void)types;
	if (!valid(device) || set != &event_set)
		return NVML_ERROR_INVALID_ARGUMENT;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(struct nvmlEventSet_st *set, void *data,
					unsigned int timeout_ms)
{
	(void)timeout_ms;
	if (set != &event_set || data == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	return FAKE_NVML_TIMEOUT;
}

EXPORT nvmlReturn_t nvmlEventSetFree(struct nvmlEventSet_st *set)
{
	return set == &event_set ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}
