/* Hooking: exports win by interposition, dlsym on the driver's handle and cuGetProcAddress[_v2]
 * hand out our wrappers honouring version and stream flags; missing real symbols are reported,
 * never called. Run with CUDA_DEVICE_MEMORY_LIMIT=1Gi over the fake driver. */
#include <pthread.h>

#include "common.h"

static void *ours(const char *name)
{
	return dlsym(RTLD_DEFAULT, name); /* libvgpu is preloaded: global scope finds it first */
}

static void *driver(void)
{
	return dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
}

static void direct_calls_are_interposed(void)
{
	CUdeviceptr p = 0;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemAlloc_v2(&p, 2 * GiB), CUDA_ERROR_OUT_OF_MEMORY); /* fake has 16G */
	CHECK_EQ(total_mem(), GiB);
}

static void dlsym_on_driver_handle_gives_our_wrappers(void)
{
	void *h = driver();

	CHECK(h != NULL);
	CHECK(dlsym(h, "cuGetProcAddress_v2") == ours("cuGetProcAddress_v2"));
	CHECK(dlsym(h, "cuGetProcAddress") == ours("cuGetProcAddress"));
	CHECK(dlsym(h, "cuMemAlloc_v2") == ours("cuMemAlloc_v2"));
	CHECK(dlsym(h, "cuLaunchKernel") == ours("cuLaunchKernel"));
	/* not wrapped: the driver's own */
	void *sync = dlsym(h, "cuCtxSynchronize");
	CHECK(sync != NULL && sync == (void *)cuCtxSynchronize);
	void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
	CHECK(nvml != NULL);
	CHECK(dlsym(nvml, "nvmlDeviceGetMemoryInfo") == ours("nvmlDeviceGetMemoryInfo"));
	CHECK(dlsym(nvml, "nvmlDeviceGetMemoryInfo_v2") == ours("nvmlDeviceGetMemoryInfo_v2"));
}

typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t,
			      CUdriverProcAddressQueryResult *);

/* What a CUDA 12 runtime does: dlopen the driver, dlsym cuGetProcAddress_v2, ask it by name. */
static void *runtime_lookup(const char *name, int version, cuuint64_t flags, CUresult *r,
			    CUdriverProcAddressQueryResult *st)
{
	gpa_v2_fn gpa = (gpa_v2_fn)dlsym(driver(), "cuGetProcAddress_v2");
	void *p = NULL;

	*r = gpa ? gpa(name, &p, version, flags, st) : CUDA_ERROR_NOT_SUPPORTED;
	return p;
}

static void get_proc_address_honours_version_and_flags(void)
{
	CUdriverProcAddressQueryResult st = 99;
	CUresult r;

	CHECK(runtime_lookup("cuMemAlloc", 12000, 0, &r, &st) == ours("cuMemAlloc_v2"));
	CHECK_EQ(r, CUDA_SUCCESS);
	CHECK_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
	CHECK(runtime_lookup("cuGetProcAddress", 12000, 0, &r, &st) == ours("cuGetProcAddress_v2"));
	CHECK(runtime_lookup("cuGetProcAddress", 11030, 0, &r, &st) == ours("cuGetProcAddress"));
	CHECK(runtime_lookup("cuLaunchKernel", 12000, 0, &r, &st) == ours("cuLaunchKernel"));
	CHECK(runtime_lookup("cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
			     &r, &st) == ours("cuLaunchKernel_ptsz"));
	CHECK(runtime_lookup("cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &r, &st) ==
	      ours("cuLaunchKernel"));
	CHECK(runtime_lookup("cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
			     &r, &st) == ours("cuMemAllocAsync_ptsz"));
	CHECK(runtime_lookup("cuMemFreeAsync", 12000, 0, &r, &st) == ours("cuMemFreeAsync"));
	CHECK(runtime_lookup("cuMemPoolCreate", 12000, 0, &r, &st) == ours("cuMemPoolCreate"));
	CHECK(runtime_lookup("cuMemPoolDestroy", 12000, 0, &r, &st) == ours("cuMemPoolDestroy"));
	CHECK(runtime_lookup("cuGraphLaunch", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
			     &r, &st) == ours("cuGraphLaunch_ptsz"));
	CHECK(runtime_lookup("cuLaunchKernelEx", 12000, 0, &r, &st) == ours("cuLaunchKernelEx"));
	CHECK(runtime_lookup("nvmlDeviceGetMemoryInfo", 12000, 0, &r, &st) == NULL);
	/* not wrapped: the driver's answer, untouched */
	CHECK(runtime_lookup("cuCtxSynchronize", 12000, 0, &r, &st) == (void *)cuCtxSynchronize);
	/* the driver's errors and status pass through */
	CHECK(runtime_lookup("cuMemAllocAsync", 11000, 0, &r, &st) == NULL);
	CHECK_EQ(r, CUDA_ERROR_NOT_FOUND);
	CHECK_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	CHECK(runtime_lookup("cuNoSuchFunction", 12000, 0, &r, &st) == NULL);
	CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

static void allocation_through_get_proc_address_is_accounted(void)
{
	CUresult (*alloc)(CUdeviceptr *, size_t);
	CUresult (*gpa)(const char *, void **, int, cuuint64_t) = NULL;
	CUdeviceptr p = 0;
	CUresult r;
	CUdriverProcAddressQueryResult st;

	CHECK(ctx_on(0) == 0);
	alloc = (CUresult(*)(CUdeviceptr *, size_t))runtime_lookup("cuMemAlloc", 12000, 0, &r, &st);
	CHECK(alloc != NULL);
	if (alloc == NULL)
		return;
	CHECK_EQ(alloc(&p, GiB + 1), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(alloc(&p, 256 * MiB), CUDA_SUCCESS);
	CHECK_EQ(free_mem(), 768 * MiB);
	/* and through the v1 entry point obtained from the v2 one */
	gpa = (CUresult(*)(const char *, void **, int, cuuint64_t))runtime_lookup(
		"cuGetProcAddress", 11030, 0, &r, &st);
	CHECK(gpa != NULL);
	if (gpa) {
		void *q = NULL;
		CHECK_EQ(gpa("cuMemFree", &q, 11030, 0), CUDA_SUCCESS);
		CHECK(q == ours("cuMemFree_v2"));
		if (q)
			CHECK_EQ(((CUresult(*)(CUdeviceptr))q)(p), CUDA_SUCCESS);
	}
	CHECK_EQ(free_mem(), GiB);
}

/* FAKE_CUDA_PROC_INTERNAL=1: the driver hands out internal entry points, not its exports. */
static void internal_entry_points_are_still_wrapped(void)
{
	CUresult r;
	CUdriverProcAddressQueryResult st;
	CUdeviceptr p;

	CHECK(ctx_on(0) == 0);
	CHECK(runtime_lookup("cuMemAlloc", 12000, 0, &r, &st) == ours("cuMemAlloc_v2"));
	CHECK(runtime_lookup("cuLaunchKernel", 12000, 0, &r, &st) == ours("cuLaunchKernel"));
	CHECK_EQ(cuMemAlloc_v2(&p, GiB + 1), CUDA_ERROR_OUT_OF_MEMORY);
}

/* Run over build/fake-old: no cuMemAllocAsync, memory pools, cuLaunchKernelEx or
 * cuGetProcAddress_v2. */
static void missing_real_symbols_report_not_supported(void)
{
	CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream) =
		(CUresult(*)(CUdeviceptr *, size_t, CUstream))ours("cuMemAllocAsync");
	CUresult (*ex)(const CUlaunchConfig *, CUfunction, void **, void **) =
		(CUresult(*)(const CUlaunchConfig *, CUfunction, void **, void **))ours(
			"cuLaunchKernelEx");
	CUresult (*gpa2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
		(gpa_v2_fn)ours("cuGetProcAddress_v2");
	CUresult (*pool_create)(CUmemoryPool *, const CUmemPoolProps *) =
		(CUresult(*)(CUmemoryPool *, const CUmemPoolProps *))ours("cuMemPoolCreate");
	CUlaunchConfig cfg = {1, 1, 1, 32, 1, 1, 0, NULL, NULL, 0};
	CUmemPoolProps props = {0};
	CUmemoryPool pool = NULL;
	CUdeviceptr p = 0;
	void *q = NULL;

	CHECK(ctx_on(0) == 0);
	CHECK(alloc_async && ex && gpa2 && pool_create);
	if (!(alloc_async && ex && gpa2 && pool_create))
		return;
	CHECK_EQ(alloc_async(&p, MiB, NULL), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ(pool_create(&pool, &props), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ(free_mem(), GiB); /* the refused call left no charge behind */
	CHECK_EQ(ex(&cfg, FAKE_KERNEL, NULL, NULL), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ(gpa2("cuMemAlloc", &q, 12000, 0, NULL), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ(cuGetProcAddress("cuMemAlloc", &q, 12000, 0), CUDA_SUCCESS);
	CHECK(q == ours("cuMemAlloc_v2"));
	CHECK_EQ(cuMemAlloc_v2(&p, MiB), CUDA_SUCCESS);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

static void *alloc_worker(void *arg)
{
	CUcontext ctx;
	CUdeviceptr p[8];
	long fails = 0;

	cuDevicePrimaryCtxRetain(&ctx, 0);
	cuCtxSetCurrent(ctx);
	for (int round = 0; round < 200; round++) {
		for (int i = 0; i < 8; i++)
			if (cuMemAlloc_v2(&p[i], 4 * MiB) != CUDA_SUCCESS)
				p[i] = 0, fails++;
		for (int i = 0; i < 8; i++)
			if (p[i])
				cuMemFree_v2(p[i]);
	}
	return (void *)fails;
}

/* 8 threads × 8 × 4 MiB = 256 MiB at most: never refused, and everything is returned. */
static void threads_allocate_concurrently(void)
{
	pthread_t th[8];
	void *fails;

	CHECK(ctx_on(0) == 0);
	for (int i = 0; i < 8; i++)
		pthread_create(&th[i], NULL, alloc_worker, NULL);
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], &fails);
		CHECK_EQ((long)fails, 0);
	}
	CHECK_EQ(free_mem(), GiB);
}

int main(int argc, char **argv)
{
	static const struct check_case cases[] = {
		CASE(direct_calls_are_interposed),
		CASE(dlsym_on_driver_handle_gives_our_wrappers),
		CASE(get_proc_address_honours_version_and_flags),
		CASE(allocation_through_get_proc_address_is_accounted),
		CASE(threads_allocate_concurrently),
		CASE(internal_entry_points_are_still_wrapped),
		CASE(missing_real_symbols_report_not_supported),
	};
	return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
