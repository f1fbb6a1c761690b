/* Internal interfaces of libvgpu. Nothing here is exported (hidden visibility by default). */
#ifndef VGPU_H
#define VGPU_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "abi.h"

#define VGPU_EXPORT __attribute__((visibility("default")))
#define VGPU_MAX_DEVICES 16
#define VGPU_UUID_LEN 64 /* "GPU-" and 36 characters, with room to spare */

/* ---- configuration (config.c): read once from the environment ---- */
enum vgpu_log_level { VGPU_LOG_ERROR = 0, VGPU_LOG_WARN = 1, VGPU_LOG_INFO = 2, VGPU_LOG_DEBUG = 3 };

struct vgpu_config {
	uint64_t mem_limit[VGPU_MAX_DEVICES]; /* bytes per CUDA ordinal, 0 = no limit */
	unsigned int sm_limit[VGPU_MAX_DEVICES]; /* percent per CUDA ordinal, 0 = no limit */
	char shared_cache[4096];              /* shared-region file */
	char priority_dir[4096];               /* CUDA_TASK_PRIORITY_DIR: the priority boards; "" = none */
	int priority;                          /* CUDA_TASK_PRIORITY: 0 high, >= 1 low (default 1) */
	unsigned int priority_hold_ms;         /* CUDA_TASK_PRIORITY_HOLD_MS */
	int log_level;
	bool any_mem_limit; /* some device has a memory limit */
	bool any_sm_limit;  /* some device has an SM limit */
	bool gate_launches; /* launches do work before the driver call: SM limit, board, limits file */
	bool limits_file;  /* VGPU_LIMITS_FILE is there: its devices, by UUID, and no others */
	/* The limits file's devices (version 2, keyed by GPU UUID). With the file, mem_limit and
	 * sm_limit above hold only the container's own share (VGPU_CONTAINER_*, by ordinal): a
	 * device's limit is the file's for its UUID, lowered by those; a device the file does not
	 * name gets no context, no memory and no launches (vgpu_dev_denied). */
	int file_devices;
	char file_uuid[VGPU_MAX_DEVICES][VGPU_UUID_LEN];
	uint64_t file_mem[VGPU_MAX_DEVICES];     /* bytes, 0 = no limit */
	unsigned int file_sm[VGPU_MAX_DEVICES];  /* percent, 0 = no limit */
	bool failed;       /* an unparseable limit: hooks refuse work (fail closed) */
	char error[512];   /* first problem found, as printed */
};

#define VGPU_DEFAULT_SHARED_CACHE "/tmp/vgpu/shared-region"
#define VGPU_DEFAULT_PRIORITY_HOLD_MS 200u
#define VGPU_MAX_PRIORITY_HOLD_MS 60000u

/* The node agent's limits file for the container (src/limits_file.c); compiled in on purpose. */
#define VGPU_LIMITS_FILE "/etc/vgpu-bridge/limits.conf"

/* Parses `envp` (a NULL-terminated "KEY=VALUE" array, like environ) into `cfg`. Returns 0, or -1
 * with cfg->failed set and cfg->error describing the first bad value. */
int vgpu_config_parse(struct vgpu_config *cfg, char *const *envp);
/* vgpu_config_parse, then the limits file at `path` when there is one: the file's limits are the
 * ceiling, the environment may only lower them. A file that is there but unusable fails closed. */
int vgpu_config_load(struct vgpu_config *cfg, char *const *envp, const char *path);
/* The limits file's settings that name no device (a KEY=VALUE array): the priority and the region,
 * over the defaults; every bad value (priority included) an error. The per-device limits are the
 * file's own reading (limits_file.c). */
int vgpu_config_parse_file_settings(struct vgpu_config *cfg, char *const *settings);
/* VGPU_CONTAINER_MEMORY_LIMIT[_<i>] and VGPU_CONTAINER_SM_LIMIT[_<i>] alone, into own->*_limit
 * (100% SM left as 100); 0, or -1 with own->error. */
int vgpu_config_container_share(struct vgpu_config *own, char *const *envp);
/* Derived fields (100% SM = none, any_*_limit, gate_launches) after the limits changed. */
void vgpu_config_settle(struct vgpu_config *cfg);
/* `<n>[k|m|g|t|Ki|Mi|Gi|Ti][B]` (k/m/g are binary, as HAMi users expect), decimals allowed with a
 * unit. Returns 0 and the byte count, or -1 with a reason in `why`. */
int vgpu_parse_bytes(const char *s, uint64_t *out, const char **why);
int vgpu_parse_percent(const char *s, unsigned int *out, const char **why);

/* ---- logging ---- */
extern int vgpu_log_level;
void vgpu_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define LOG_ERR(...) vgpu_log(VGPU_LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...) do { if (vgpu_log_level >= VGPU_LOG_WARN) vgpu_log(VGPU_LOG_WARN, __VA_ARGS__); } while (0)
#define LOG_INFO(...) do { if (vgpu_log_level >= VGPU_LOG_INFO) vgpu_log(VGPU_LOG_INFO, __VA_ARGS__); } while (0)
#define LOG_DEBUG(...) do { if (vgpu_log_level >= VGPU_LOG_DEBUG) vgpu_log(VGPU_LOG_DEBUG, __VA_ARGS__); } while (0)

/* ---- the real driver (init.c) ---- */
#define CU_HOOK(name, base, since, ptds, params, args) CUresult(*name) params;
#define CU_REAL(name, params, args) CUresult(*name) params;
#define NVML_HOOK(name, params, args) nvmlReturn_t(*name) params;
#define NVML_REAL(name, params, args) nvmlReturn_t(*name) params;
struct vgpu_real {
#include "symbols.def"
};
extern struct vgpu_real vgpu_real;

/* Prototypes of our exported wrappers, checked against the table by the compiler. */
#define CU_HOOK(name, base, since, ptds, params, args) VGPU_EXPORT CUresult name params;
#define NVML_HOOK(name, params, args) VGPU_EXPORT nvmlReturn_t name params;
#include "symbols.def"

/* real_<name>(...): calls the real symbol, or reports it missing; never calls through NULL. */
#define CU_HOOK(name, base, since, ptds, params, args)                                             \
	static inline CUresult real_##name params                                                  \
	{                                                                                          \
		return vgpu_real.name ? vgpu_real.name args : CUDA_ERROR_NOT_SUPPORTED;            \
	}
#define CU_REAL(name, params, args) CU_HOOK(name, name, 0, 0, params, args)
#define NVML_HOOK(name, params, args)                                                              \
	static inline nvmlReturn_t real_##name params                                              \
	{                                                                                          \
		return vgpu_real.name ? vgpu_real.name args : NVML_ERROR_FUNCTION_NOT_FOUND;       \
	}
#define NVML_REAL(name, params, args) NVML_HOOK(name, params, args)
#include "symbols.def"

/* One-time initialisation (init.c): config, real symbols, the shared region. Cheap after the
 * first call. Modules keep no list in init.c: each registers its own fork handler
 * (pthread_atfork) the first time it has state a forked child must not inherit. */
void vgpu_init(void);
/* True while this thread runs the initialisation (dlsym then answers plainly). */
bool vgpu_initialising(void);
/* The real dlsym (also jumped to by dlsym_entry.S); resolved by the library's constructor. */
typedef void *(*vgpu_dlsym_fn)(void *, const char *);
extern vgpu_dlsym_fn vgpu_real_dlsym;
void vgpu_resolve_real_dlsym(void);
extern struct vgpu_config vgpu_cfg;
/* First statement of every CUDA hook that does work: initialise, refuse if configured badly. */
#define VGPU_ENTER()                                                                               \
	do {                                                                                       \
		vgpu_init();                                                                       \
		if (vgpu_cfg.failed)                                                               \
			return CUDA_ERROR_NOT_PERMITTED;                                           \
	} while (0)

/* ---- devices (device.c): one index space keyed by UUID ---- */
/* Region device index of CUDA ordinal `dev` of this process, -1 if unknown. */
int vgpu_dev_index(CUdevice dev);
/* CUDA ordinal of the current context's device, or -1. */
int vgpu_current_device(void);
/* CUDA ordinal of the device stream `s` belongs to (a special handle, or a stream the driver
 * cannot place: the current context's device), or -1. */
int vgpu_stream_device(CUstream s);
/* Effective limits of CUDA ordinal `dev` (0 = none). */
uint64_t vgpu_mem_limit(CUdevice dev);
unsigned int vgpu_sm_limit(CUdevice dev);
/* Memory limit for an NVML handle whose UUID vgpu_nvml_denied read ("" when it could not): looks
 * the UUID up in the region, then falls back to treating the NVML index as the CUDA ordinal.
 * Returns the region device index or -1. */
int vgpu_nvml_dev_index(nvmlDevice_t device, const char *uuid, uint64_t *limit);
/* With a limits file: true for a CUDA ordinal / NVML device whose UUID the file does not name
 * (or whose UUID cannot be read). Such a device gets no context, no memory and no launches
 * (fail closed);
 * the first refusal per device is logged with its UUID. Without a file: false. */
bool vgpu_dev_denied(CUdevice dev);
/* The NVML form reads the device's UUID into `uuid` ("" when it cannot), once per call, for
 * vgpu_nvml_dev_index to use after it. */
bool vgpu_nvml_denied(nvmlDevice_t device, char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE]);
/* Before a launch: true when a limits file is there and the current context's device is one it
 * does not name (one branch once every visible device is known to be named). */
bool vgpu_launch_denied(void);
/* The file's device slot for `uuid` (case-insensitive), or -1. */
int vgpu_file_slot(const struct vgpu_config *cfg, const char *uuid);
void vgpu_format_uuid(const CUuuid *u, char *buf, size_t len);
int vgpu_dev_uuid(CUdevice dev, char *buf, size_t len);

/* ---- time (the launch gates of sm.c and priority.c) ---- */
/* Nanoseconds on `clock` (CLOCK_MONOTONIC within a process, CLOCK_BOOTTIME across containers). */
/* The lower of two limits where 0 means none. */
static inline uint64_t vgpu_lower_limit(uint64_t a, uint64_t b)
{
	return a == 0 ? b : b == 0 || a < b ? a : b;
}

static inline uint64_t vgpu_clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Sleeps `ns`, resuming after a signal. */
static inline void vgpu_sleep_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- task priority (priority.c) ---- */
/* Before a launch on the current context's device (only with a board dir configured): a
 * priority-0 process stamps the device's board, any other waits while a stamp is fresh. */
void vgpu_priority_launch(void);

#endif
