/* Finding the real driver, one-time initialisation, dlsym and cuGetProcAddress substitution. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "region.h"
#include "vgpu.h"

extern char **environ;

struct vgpu_real vgpu_real;
struct vgpu_config vgpu_cfg;

typedef void *(*dlsym_fn)(void *, const char *);
/* Used by dlsym_entry.S; set before the first jump through it. */
__attribute__((visibility("hidden"))) dlsym_fn vgpu_real_dlsym;
void *vgpu_dlsym_lookup(void *handle, const char *name);

/* ---- the substitution table, expanded from symbols.def ---- */
struct hook_entry {
	const char *name;
	const char *base; /* cuGetProcAddress name; NULL for NVML */
	int since;
	int ptds;
	void *hook;
	void **real;
};

static const struct hook_entry hooks[] = {
#define CU_HOOK(n, b, s, p, params, args) {#n, #b, s, p, (void *)n, (void **)&vgpu_real.n},
#define NVML_HOOK(n, params, args) {#n, NULL, 0, 0, (void *)n, (void **)&vgpu_real.n},
#include "symbols.def"
};
#define NHOOKS (sizeof(hooks) / sizeof(hooks[0]))

static const struct hook_entry *hook_by_name(const char *name)
{
	for (size_t i = 0; i < NHOOKS; i++)
		if (strcmp(hooks[i].name, name) == 0)
			return &hooks[i];
	return NULL;
}

/* Is p one of our wrappers? (debug logging) */
static bool hook_of(void *p)
{
	for (size_t i = 0; i < NHOOKS; i++)
		if (hooks[i].hook == p)
			return true;
	return false;
}

static void resolve_real_dlsym(void)
{
	dlsym_fn fn;

	if (__atomic_load_n(&vgpu_real_dlsym, __ATOMIC_ACQUIRE))
		return;
	/* glibc >= 2.34 has dlsym in libc (GLIBC_2.34); older ones in libdl. */
	fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (fn == NULL)
		fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	if (fn == NULL)
		fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
	__atomic_store_n(&vgpu_real_dlsym, fn, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void vgpu_constructor(void)
{
	resolve_real_dlsym(); /* nothing else at load time: most preloaded processes never use CUDA */
}

static void *open_lib(const char *soname)
{
	void *h = dlopen(soname, RTLD_NOW | RTLD_NODELETE);

	if (h == NULL)
		LOG_INFO("%s not loaded: %s", soname, dlerror());
	return h;
}

static void atfork_child(void)
{
	vgpu_region_atfork_child();
	vgpu_memory_atfork_child();
	vgpu_sm_atfork_child();
	vgpu_priority_atfork_child();
}

/* Set while this thread initialises: a driver constructor that calls dlsym on its own handle
 * then gets the plain answer instead of re-entering pthread_once (a self-deadlock). */
static __thread int initialising;

static void do_init(void)
{
	void *cuda, *nvml;

	initialising = 1;
	resolve_real_dlsym();
	vgpu_config_load(&vgpu_cfg, environ, VGPU_LIMITS_FILE);
	vgpu_log_level = vgpu_cfg.log_level;
	if (vgpu_cfg.failed)
		LOG_ERR("%s; refusing GPU work (fail closed)", vgpu_cfg.error);
	else if (vgpu_cfg.limits_file)
		LOG_INFO("limits from %s (the environment may only lower them)", VGPU_LIMITS_FILE);
	cuda = open_lib("libcuda.so.1");
	nvml = open_lib("libnvidia-ml.so.1");
#define CU_HOOK(n, b, s, p, params, args) CU_REAL(n, params, args)
#define CU_REAL(n, params, args)                                                                   \
	vgpu_real.n = cuda ? (__typeof__(vgpu_real.n))vgpu_real_dlsym(cuda, #n) : NULL;
#define NVML_HOOK(n, params, args) NVML_REAL(n, params, args)
#define NVML_REAL(n, params, args)                                                                 \
	vgpu_real.n = nvml ? (__typeof__(vgpu_real.n))vgpu_real_dlsym(nvml, #n) : NULL;
#include "symbols.def"
	if (vgpu_region_open(vgpu_cfg.shared_cache, vgpu_cfg.priority) < 0 && vgpu_cfg.any_mem_limit &&
	    !vgpu_cfg.failed) {
		vgpu_cfg.failed = true;
		snprintf(vgpu_cfg.error, sizeof(vgpu_cfg.error), "shared region %.400s unavailable",
			 vgpu_cfg.shared_cache);
		LOG_ERR("a memory limit is set but the %s; refusing GPU work (fail closed)",
			vgpu_cfg.error);
	}
	pthread_atfork(NULL, NULL, atfork_child);
	LOG_DEBUG("initialised: libcuda %s, libnvidia-ml %s", cuda ? "found" : "missing",
		  nvml ? "found" : "missing");
	initialising = 0;
}

void vgpu_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, do_init);
}

/* Called by dlsym_entry.S. Returns our wrapper when `handle` would have given the real driver
 * entry point we wrap; NULL means "let the real dlsym answer". */
void *vgpu_dlsym_lookup(void *handle, const char *name)
{
	const struct hook_entry *e;
	void *p;

	resolve_real_dlsym();
	if (handle == RTLD_NEXT || handle == RTLD_DEFAULT || name == NULL)
		return NULL; /* global scope already finds our exports first */
	if (!(name[0] == 'c' && name[1] == 'u') && strncmp(name, "nvml", 4) != 0)
		return NULL;
	if ((e = hook_by_name(name)) == NULL || initialising)
		return NULL;
	vgpu_init();
	p = vgpu_real_dlsym(handle, name);
	return p != NULL && p == *e->real ? e->hook : NULL;
}

/* Maps what the real cuGetProcAddress returned to our wrapper of that same function. */
static void *substitute(const char *symbol, void *p, int version, cuuint64_t flags)
{
	const struct hook_entry *best = NULL;
	int want_ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;

	for (size_t i = 0; i < NHOOKS; i++)
		if (hooks[i].base && *hooks[i].real == p)
			return hooks[i].hook;
	/* The driver handed out an entry point that is not its exported symbol: choose our
	 * wrapper by name, version and stream flavour, as the driver itself does. */
	for (size_t i = 0; i < NHOOKS; i++) {
		const struct hook_entry *e = &hooks[i];
		if (e->base == NULL || strcmp(e->base, symbol) != 0 || e->since > version ||
		    *e->real == NULL)
			continue;
		if (best == NULL || (e->ptds == want_ptds && best->ptds != want_ptds) ||
		    (e->ptds == best->ptds && e->since > best->since))
			best = e;
	}
	if (best) {
		LOG_DEBUG("cuGetProcAddress(%s, %d, %llu): unknown entry point, using %s", symbol,
			  version, (unsigned long long)flags, best->name);
		return best->hook;
	}
	return p;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *symbolStatus)
{
	CUresult r;

	vgpu_init();
	r = real_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
	if (r == CUDA_SUCCESS && symbol && pfn && *pfn)
		*pfn = substitute(symbol, *pfn, cudaVersion, flags);
	LOG_DEBUG("cuGetProcAddress_v2(%s, %d, %llu) = %d%s", symbol ? symbol : "(null)", cudaVersion,
		  (unsigned long long)flags, r, r == CUDA_SUCCESS && pfn && hook_of(*pfn) ? " (wrapped)" : "");
	return r;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	CUresult r;

	vgpu_init();
	r = real_cuGetProcAddress(symbol, pfn, cudaVersion, flags);
	if (r == CUDA_SUCCESS && symbol && pfn && *pfn)
		*pfn = substitute(symbol, *pfn, cudaVersion, flags);
	LOG_DEBUG("cuGetProcAddress(%s, %d, %llu) = %d%s", symbol ? symbol : "(null)", cudaVersion,
		  (unsigned long long)flags, r, r == CUDA_SUCCESS && pfn && hook_of(*pfn) ? " (wrapped)" : "");
	return r;
}

CUresult cuInit(unsigned int Flags)
{
	vgpu_init();
	if (vgpu_cfg.failed)
		return CUDA_ERROR_NOT_PERMITTED;
	return real_cuInit(Flags);
}
