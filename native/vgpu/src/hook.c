/* Substitution: dlsym and cuGetProcAddress[_v2] hand out our wrappers for the driver functions
 * we wrap. The top of the library: it names every wrapper; no module calls back into it. */
#include <dlfcn.h>
#include <string.h>

#include "vgpu.h"

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

/* Called by dlsym_entry.S. Returns our wrapper when `handle` would have given the real driver
 * entry point we wrap; NULL means "let the real dlsym answer". */
void *vgpu_dlsym_lookup(void *handle, const char *name)
{
	const struct hook_entry *e;
	void *p;

	vgpu_resolve_real_dlsym();
	if (handle == RTLD_NEXT || handle == RTLD_DEFAULT || name == NULL)
		return NULL; /* global scope already finds our exports first */
	if (!(name[0] == 'c' && name[1] == 'u') && strncmp(name, "nvml", 4) != 0)
		return NULL;
	if ((e = hook_by_name(name)) == NULL || vgpu_initialising())
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
