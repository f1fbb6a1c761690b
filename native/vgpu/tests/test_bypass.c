/*
 * What LD_PRELOAD enforcement can never stop, shown over the fake driver (SECURITY.md).
 *
 * These cases PASS by demonstrating documented limits of the design, not bugs: a process inside
 * the container that wants more than its share can get it in each of these ways, and a case
 * fails if the escape stops working (so a change that closes one must update SECURITY.md too).
 * Where the node agent's limits file (/etc/vgpu-bridge/limits.conf, tests/limits_ns.h) closes
 * the way, the case shows that as well.
 *
 * Run with CUDA_DEVICE_MEMORY_LIMIT=1Gi (the container's limit, from the environment as the CDI
 * spec sets it), CUDA_DEVICE_MEMORY_SHARED_CACHE set to a fresh region and TEST_TMP.
 */
#include <dlfcn.h>

#include "limits_ns.h"

/* 1 GiB on the fake driver's device 0 (tests/fake/fake.h) */
#define FILE_1GI "vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT_GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae00=1Gi\n"

static char region[4096]; /* the container's region, from the environment */

static void the_container_limit_is_1gi(void)
{
	CUdeviceptr p;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemAlloc_v2(&p, 2 * GiB), CUDA_ERROR_OUT_OF_MEMORY);
}

/* (a) A child started with its own, higher limit variable. */
static const char *const HIGHER_LIMIT[] = {"CUDA_DEVICE_MEMORY_LIMIT=8Gi", NULL};

static void child_escapes(void)
{
	the_container_limit_is_1gi();
	CHECK_EQ(run_alloc_worker(2 * GiB, HIGHER_LIMIT, NULL), ALLOC_OK); /* the documented limit */
}

static void child_is_held(void)
{
	the_container_limit_is_1gi();
	CHECK_EQ(run_alloc_worker(2 * GiB, HIGHER_LIMIT, NULL), ALLOC_OUT_OF_MEMORY);
}

static void a_child_with_its_own_limit_variable_escapes_unless_the_limits_file_is_there(void)
{
	in_a_container(NULL, child_escapes);
	in_a_container(FILE_1GI, child_is_held);
}

/* (b) A child with a region file of its own: the container's other processes' usage is not in it,
 * so it gets a whole limit of its own beside theirs. */
static const char *private_region(void)
{
	static char env[600];

	snprintf(env, sizeof(env), "CUDA_DEVICE_MEMORY_SHARED_CACHE=%s/private.%d/vgpu.cache",
		 getenv("TEST_TMP") ? getenv("TEST_TMP") : "/tmp", (int)getpid());
	return env;
}

static void hold_768mi_then_run_a_child(int expect_child)
{
	const char *const own_region[] = {private_region(), NULL};
	CUdeviceptr p;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemAlloc_v2(&p, 768 * MiB), CUDA_SUCCESS);
	/* in the container's region the two share one limit ... */
	CHECK_EQ(run_alloc_worker(768 * MiB, NULL, NULL), ALLOC_OUT_OF_MEMORY);
	/* ... a region of its own: 768 MiB more, 1.5 GiB for the container under a 1 GiB limit */
	CHECK_EQ(run_alloc_worker(768 * MiB, own_region, NULL), expect_child);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

static void private_region_escapes(void)
{
	hold_768mi_then_run_a_child(ALLOC_OK); /* the documented limit */
}

static void private_region_is_ignored(void)
{
	hold_768mi_then_run_a_child(ALLOC_OUT_OF_MEMORY);
}

static void a_private_region_file_escapes_unless_the_limits_file_names_the_region(void)
{
	char text[4300];

	in_a_container(NULL, private_region_escapes);
	snprintf(text, sizeof(text), FILE_1GI
				     "CUDA_DEVICE_MEMORY_SHARED_CACHE=%s\n", region);
	in_a_container(text, private_region_is_ignored);
}

/* (c) The driver loaded again with dlmopen into a new link namespace: that copy's symbols are
 * not interposed by anything preloaded, so nothing is limited or counted, limits file or not. */
typedef CUresult (*init_fn)(unsigned int);
typedef CUresult (*device_get_fn)(CUdevice *, int);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*set_current_fn)(CUcontext);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);

static CUresult alloc_through_a_private_driver(size_t bytes)
{
	void *h = dlmopen(LM_ID_NEWLM, "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	CUdeviceptr p;
	CUcontext ctx;
	CUdevice dev;
	CUresult r;

	if (h == NULL) {
		fprintf(stderr, "    dlmopen: %s\n", dlerror());
		return CUDA_ERROR_NOT_FOUND;
	}
	if ((r = ((init_fn)dlsym(h, "cuInit"))(0)) || (r = ((device_get_fn)dlsym(h, "cuDeviceGet"))(&dev, 0)) ||
	    (r = ((retain_fn)dlsym(h, "cuDevicePrimaryCtxRetain"))(&ctx, dev)) ||
	    (r = ((set_current_fn)dlsym(h, "cuCtxSetCurrent"))(ctx)))
		return r;
	return ((alloc_fn)dlsym(h, "cuMemAlloc_v2"))(&p, bytes);
}

static void dlmopen_escapes(void)
{
	the_container_limit_is_1gi();
	CHECK_EQ(alloc_through_a_private_driver(4 * GiB), CUDA_SUCCESS); /* the documented limit */
	CHECK_EQ(free_mem(), GiB); /* and the container's accounting never saw it */
}

static void the_driver_loaded_with_dlmopen_is_not_hooked_even_with_the_limits_file(void)
{
	in_a_container(FILE_1GI, dlmopen_escapes);
}

int main(int argc, char **argv)
{
	static const struct check_case cases[] = {
		CASE(a_child_with_its_own_limit_variable_escapes_unless_the_limits_file_is_there),
		CASE(a_private_region_file_escapes_unless_the_limits_file_names_the_region),
		CASE(the_driver_loaded_with_dlmopen_is_not_hooked_even_with_the_limits_file),
	};
	const char *r = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");

	if (argc == 3 && strcmp(argv[1], "alloc") == 0)
		return alloc_worker(argv[2]);
	snprintf(region, sizeof(region), "%s", r ? r : "");
	return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
