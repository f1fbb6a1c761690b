/* One-time initialisation: the configuration, the real driver's symbols, the shared region.
 * The bottom of the library: every module calls vgpu_init(), this file calls none of them back
 * (each module registers its own fork handler on first use). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "region.h"
#include "vgpu.h"

extern char **environ;

struct vgpu_real vgpu_real;
struct vgpu_config vgpu_cfg;

/* Used by dlsym_entry.S; set before the first jump through it. */
__attribute__((visibility("hidden"))) vgpu_dlsym_fn vgpu_real_dlsym;

void vgpu_resolve_real_dlsym(void)
{
	vgpu_dlsym_fn fn;

	if (__atomic_load_n(&vgpu_real_dlsym, __ATOMIC_ACQUIRE))
		return;
	/* glibc >= 2.34 has dlsym in libc (GLIBC_2.34); older ones in libdl. */
	fn = (vgpu_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (fn == NULL)
		fn = (vgpu_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	if (fn == NULL)
		fn = (vgpu_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
	__atomic_store_n(&vgpu_real_dlsym, fn, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void vgpu_constructor(void)
{
	vgpu_resolve_real_dlsym(); /* nothing else at load time: most preloaded processes never use CUDA */
}

static void *open_lib(const char *soname)
{
	void *h = dlopen(soname, RTLD_NOW | RTLD_NODELETE);

	if (h == NULL)
		LOG_INFO("%s not loaded: %s", soname, dlerror());
	return h;
}

/* Set while this thread initialises: a driver constructor that calls dlsym on its own handle
 * then gets the plain answer instead of re-entering pthread_once (a self-deadlock). */
static __thread int initialising;

bool vgpu_initialising(void)
{
	return initialising != 0;
}

static void load_real_symbols(void *cuda, void *nvml)
{
#define CU_HOOK(n, b, s, p, params, args) CU_REAL(n, params, args)
#define CU_REAL(n, params, args)                                                                   \
	vgpu_real.n = cuda ? (__typeof__(vgpu_real.n))vgpu_real_dlsym(cuda, #n) : NULL;
#define NVML_HOOK(n, params, args) NVML_REAL(n, params, args)
#define NVML_REAL(n, params, args)                                                                 \
	vgpu_real.n = nvml ? (__typeof__(vgpu_real.n))vgpu_real_dlsym(nvml, #n) : NULL;
#include "symbols.def"
}

/* The region, which registers its fork handler first: memory, sm and priority only come to
 * theirs through a hook, after this. (Each handler resets only its own module's state, so the
 * order does not matter; it is written down so that nobody has to find that out.) */
static void open_region(void)
{
	if (vgpu_region_open(vgpu_cfg.shared_cache, vgpu_cfg.priority) < 0 && vgpu_cfg.any_mem_limit &&
	    !vgpu_cfg.failed) {
		vgpu_cfg.failed = true;
		snprintf(vgpu_cfg.error, sizeof(vgpu_cfg.error), "shared region %.400s unavailable",
			 vgpu_cfg.shared_cache);
		LOG_ERR("a memory limit is set but the %s; refusing GPU work (fail closed)",
			vgpu_cfg.error);
	}
}

static void do_init(void)
{
	void *cuda, *nvml;

	initialising = 1;
	vgpu_resolve_real_dlsym();
	vgpu_config_load(&vgpu_cfg, environ, VGPU_LIMITS_FILE);
	vgpu_log_level = vgpu_cfg.log_level;
	if (vgpu_cfg.failed)
		LOG_ERR("%s; refusing GPU work (fail closed)", vgpu_cfg.error);
	else if (vgpu_cfg.limits_file)
		LOG_INFO("limits from %s (the environment may only lower them)", VGPU_LIMITS_FILE);
	cuda = open_lib("libcuda.so.1");
	nvml = open_lib("libnvidia-ml.so.1");
	load_real_symbols(cuda, nvml);
	open_region();
	LOG_DEBUG("initialised: libcuda %s, libnvidia-ml %s", cuda ? "found" : "missing",
		  nvml ? "found" : "missing");
	initialising = 0;
}

void vgpu_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, do_init);
}

CUresult cuInit(unsigned int Flags)
{
	vgpu_init();
	if (vgpu_cfg.failed)
		return CUDA_ERROR_NOT_PERMITTED;
	return real_cuInit(Flags);
}
