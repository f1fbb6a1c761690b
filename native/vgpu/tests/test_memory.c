/* Memory shares over the fake driver. Run with FAKE_CUDA_DEVICES=2,
 * CUDA_DEVICE_MEMORY_LIMIT=1Gi and CUDA_DEVICE_MEMORY_LIMIT_1=256m; each case leaves usage 0. */
#include "common.h"

static size_t used_now(void)
{
	return GiB - free_mem();
}

static void memory_info_shows_the_limit(void)
{
	size_t f = 0, t = 0, total = 0;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
	CHECK_EQ(t, GiB);
	CHECK_EQ(f, GiB);
	CHECK_EQ(cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS);
	CHECK_EQ(total, GiB);
	CHECK_EQ(cuDeviceTotalMem_v2(&total, 1), CUDA_SUCCESS);
	CHECK_EQ(total, 256 * MiB);
	/* a NULL output is the driver's error, not a crash */
	CHECK_EQ(cuMemGetInfo_v2(NULL, &t), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cuMemGetInfo_v2(&f, NULL), CUDA_ERROR_INVALID_VALUE);
}

static void the_whole_limit_is_usable_and_not_a_byte_more(void)
{
	CUdeviceptr a = 0, b = 0;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemAlloc_v2(&a, GiB), CUDA_SUCCESS);
	CHECK_EQ(free_mem(), 0);
	CHECK_EQ(cuMemAlloc_v2(&b, 1), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
	CHECK_EQ(free_mem(), GiB);
	CHECK_EQ(cuMemAlloc_v2(&a, GiB + 1), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(free_mem(), GiB);
}

static void allocations_are_rounded_to_the_granularity(void)
{
	CUdeviceptr a = 0, b = 0;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemAlloc_v2(&a, 3 * MiB + 1), CUDA_SUCCESS); /* 2 MiB pages */
	CHECK_EQ(used_now(), 4 * MiB);
	CHECK_EQ(cuMemAlloc_v2(&b, 1000), CUDA_SUCCESS); /* small: 512-byte sub-allocation */
	CHECK_EQ(used_now(), 4 * MiB + 1024);
	cuMemFree_v2(a);
	cuMemFree_v2(b);
	CHECK_EQ(used_now(), 0);
}

static void a_failed_driver_call_leaves_no_charge(void)
{
	CUdeviceptr p = 0;
	size_t pitch = 0;

	CHECK(ctx_on(0) == 0);
	/* element size 3 is invalid: the fake driver refuses after we reserved */
	CHECK_EQ(cuMemAllocPitch_v2(&p, &pitch, 1000, 1000, 3), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(used_now(), 0);
	CHECK_EQ(cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(used_now(), 0);
}

static void no_context_is_the_driver_error(void)
{
	CUdeviceptr p = 0;

	CHECK_EQ(cuInit(0), CUDA_SUCCESS);
	cuCtxSetCurrent(NULL);
	CHECK_EQ(cuMemAlloc_v2(&p, MiB), CUDA_ERROR_INVALID_CONTEXT);
	CHECK(ctx_on(0) == 0);
	CHECK_EQ(used_now(), 0);
}

static void pitch_is_charged_as_the_driver_laid_it_out(void)
{
	CUdeviceptr p = 0;
	size_t pitch = 0;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemAllocPitch_v2(&p, &pitch, 1000, 3000, 4), CUDA_SUCCESS);
	CHECK_EQ(pitch, 1024);
	CHECK_EQ(used_now(), 4 * MiB); /* 1024 × 3000 = 2.93 MiB → two 2 MiB pages */
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 0);
}

static void managed_async_and_pool_allocations_count(void)
{
	CUdeviceptr m = 0, a = 0, pl = 0, x = 0;
	CUmemoryPool pool = NULL;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocManaged(&m, 256 * MiB, 1), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocAsync(&a, 256 * MiB, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocFromPoolAsync(&pl, 256 * MiB, pool, NULL), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 768 * MiB);
	CHECK_EQ(cuMemAllocAsync(&x, 257 * MiB, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemFreeAsync(a, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuMemFreeAsync(pl, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuMemFree_v2(m), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 0);
}

static void ptsz_variants_count_too(void)
{
	CUresult (*alloc)(CUdeviceptr *, size_t, CUstream) = NULL;
	CUresult (*release)(CUdeviceptr, CUstream) = NULL;
	CUdeviceptr a = 0;

	CHECK(ctx_on(0) == 0);
	cuGetProcAddress("cuMemAllocAsync", (void **)&alloc, 12000,
			 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
	cuGetProcAddress("cuMemFreeAsync", (void **)&release, 12000,
			 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
	CHECK(alloc == dlsym(RTLD_DEFAULT, "cuMemAllocAsync_ptsz"));
	CHECK(alloc && release);
	if (!alloc || !release)
		return;
	CHECK_EQ(alloc(&a, 100 * MiB, NULL), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 100 * MiB);
	CHECK_EQ(alloc(&a, GiB, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(release(a, NULL), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 0);
}

/* Free bytes of device `dev`'s share, seen from its own context; device 0's context after. */
static size_t free_on(int dev)
{
	size_t f;

	CHECK(ctx_on(dev) == 0);
	f = free_mem();
	CHECK(ctx_on(0) == 0);
	return f;
}

/* Stream-ordered memory is on the stream's device, whatever context is current: it is charged
 * to, and refused by, that device's share, and its free gives that device's room back. */
static void async_allocations_are_charged_to_the_streams_device(void)
{
	CUresult (*alloc_ptsz)(CUdeviceptr *, size_t, CUstream) =
		(CUresult(*)(CUdeviceptr *, size_t, CUstream))dlsym(RTLD_DEFAULT,
								     "cuMemAllocAsync_ptsz");
	CUdeviceptr a = 0, b = 0, c = 0;
	CUstream s1 = NULL;
	CUdevice cur = -1;

	CHECK(ctx_on(1) == 0);
	CHECK_EQ(cuStreamCreate(&s1, 0), CUDA_SUCCESS);
	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemAllocAsync(&a, 200 * MiB, s1), CUDA_SUCCESS);
	CHECK_EQ(fake_cuda_memory_used(1), 200 * MiB); /* where the driver put it */
	CHECK_EQ(cuCtxGetDevice(&cur), CUDA_SUCCESS);
	CHECK_EQ(cur, 0); /* the thread's context is left as it was */
	CHECK_EQ(used_now(), 0);
	CHECK_EQ(free_on(1), 56 * MiB);
	CHECK_EQ(cuMemAllocAsync(&b, 100 * MiB, s1), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(alloc_ptsz != NULL);
	if (alloc_ptsz != NULL)
		CHECK_EQ(alloc_ptsz(&b, 100 * MiB, s1), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(fake_cuda_memory_used(1), 200 * MiB);
	/* the special handles are the current context's stream */
	CHECK_EQ(cuMemAllocAsync(&b, 100 * MiB, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocAsync(&c, 100 * MiB, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 200 * MiB);
	CHECK_EQ(cuMemFreeAsync(c, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuMemFreeAsync(b, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuMemFreeAsync(a, NULL), CUDA_SUCCESS); /* ordered on device 0's stream */
	CHECK_EQ(free_on(1), 256 * MiB);
	CHECK_EQ(used_now(), 0);
	CHECK_EQ(cuStreamDestroy_v2(s1), CUDA_SUCCESS);
}

/* With no context current, a stream still names its device: the allocation is charged there
 * (it was charged nowhere, so one card's share was no bound at all). */
static void an_async_allocation_without_a_current_context_is_charged_to_the_stream(void)
{
	CUmemPoolProps on0 = {0};
	CUmemoryPool pool = NULL;
	CUdeviceptr a = 0, b = 0;
	CUstream s0 = NULL;

	CHECK(ctx_on(0) == 0);
	on0.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	on0.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	CHECK_EQ(cuMemPoolCreate(&pool, &on0), CUDA_SUCCESS);
	CHECK_EQ(cuStreamCreate(&s0, 0), CUDA_SUCCESS);
	CHECK_EQ(cuCtxSetCurrent(NULL), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocAsync(&a, 2 * GiB, s0), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemAllocFromPoolAsync(&a, 2 * GiB, pool, s0), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemAllocAsync(&a, 600 * MiB, s0), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocFromPoolAsync(&b, 500 * MiB, pool, s0), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(fake_cuda_memory_used(0), 600 * MiB);
	CHECK_EQ(cuMemFreeAsync(a, s0), CUDA_SUCCESS);
	CHECK(ctx_on(0) == 0);
	CHECK_EQ(used_now(), 0);
	CHECK_EQ(cuStreamDestroy_v2(s0), CUDA_SUCCESS);
	CHECK_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
}

/* An allocation from a pool is where the pool keeps its memory: a pool on device 1 is device 1's
 * share whatever the stream; a device's default pool too; a pool of pinned host memory is none. */
static void pool_allocations_are_charged_to_the_pools_device(void)
{
	CUmemPoolProps on1 = {0}, host = {0};
	CUmemoryPool p1 = NULL, ph = NULL, d1 = NULL;
	CUdeviceptr a = 0, b = 0, h = 0;

	CHECK(ctx_on(0) == 0);
	on1.allocType = host.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	on1.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	on1.location.id = 1;
	host.location.type = CU_MEM_LOCATION_TYPE_HOST;
	CHECK_EQ(cuMemPoolCreate(&p1, &on1), CUDA_SUCCESS);
	CHECK_EQ(cuMemPoolCreate(&ph, &host), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocFromPoolAsync(&a, 200 * MiB, p1, NULL), CUDA_SUCCESS);
	CHECK_EQ(fake_cuda_memory_used(1), 200 * MiB);
	CHECK_EQ(used_now(), 0);
	CHECK_EQ(free_on(1), 56 * MiB);
	CHECK_EQ(cuMemAllocFromPoolAsync(&b, 100 * MiB, p1, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	/* device 1's default pool: the driver's own, no cuMemPoolCreate made it */
	CHECK_EQ(cuDeviceGetDefaultMemPool(&d1, 1), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocFromPoolAsync(&b, 100 * MiB, d1, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemAllocFromPoolAsync(&b, 56 * MiB, d1, NULL), CUDA_SUCCESS);
	CHECK_EQ(free_on(1), 0);
	/* pinned host memory is no device's */
	CHECK_EQ(cuMemAllocFromPoolAsync(&h, 2 * GiB, ph, NULL), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 0);
	CHECK_EQ(cuMemFreeAsync(h, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuMemFreeAsync(b, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuMemFreeAsync(a, NULL), CUDA_SUCCESS);
	CHECK_EQ(free_on(1), 256 * MiB);
	CHECK_EQ(cuMemPoolDestroy(p1), CUDA_SUCCESS);
	CHECK_EQ(cuMemPoolDestroy(ph), CUDA_SUCCESS);
	/* a destroyed pool's handle is refused by the driver and leaves no charge */
	CHECK_EQ(cuMemAllocFromPoolAsync(&a, MiB, p1, NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(used_now(), 0);
	CHECK_EQ(free_on(1), 256 * MiB);
}

static void vmm_device_memory_counts_host_memory_does_not(void)
{
	CUmemAllocationProp dev = {0}, host = {0};
	CUmemGenericAllocationHandle h1 = 0, h2 = 0, h3 = 0;

	CHECK(ctx_on(0) == 0);
	dev.type = host.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	dev.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	dev.location.id = 0;
	host.location.type = CU_MEM_LOCATION_TYPE_HOST;
	CHECK_EQ(cuMemCreate(&h1, 512 * MiB, &dev, 0), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 512 * MiB);
	CHECK_EQ(cuMemCreate(&h2, 2 * GiB, &host, 0), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 512 * MiB);
	CHECK_EQ(cuMemCreate(&h3, 600 * MiB, &dev, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemRelease(h1), CUDA_SUCCESS);
	CHECK_EQ(cuMemRelease(h2), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 0);
	/* the allocation's own device decides, not the current context */
	dev.location.id = 1;
	CHECK_EQ(cuMemCreate(&h1, 300 * MiB, &dev, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemCreate(&h1, 256 * MiB, &dev, 0), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 0);
	CHECK_EQ(cuMemRelease(h1), CUDA_SUCCESS);
}

static void arrays_count(void)
{
	CUDA_ARRAY_DESCRIPTOR d2 = {4096, 4096, CU_AD_FORMAT_FLOAT, 4};          /* 256 MiB */
	CUDA_ARRAY3D_DESCRIPTOR d3 = {1024, 1024, 256, CU_AD_FORMAT_HALF, 2, 0}; /* 1 GiB */
	CUarray a = NULL, b = NULL;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuArrayCreate_v2(&a, &d2), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 256 * MiB);
	CHECK_EQ(cuArray3DCreate_v2(&b, &d3), CUDA_ERROR_OUT_OF_MEMORY);
	d3.Depth = 128; /* 512 MiB */
	CHECK_EQ(cuArray3DCreate_v2(&b, &d3), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 768 * MiB);
	CHECK_EQ(cuArrayDestroy(a), CUDA_SUCCESS);
	CHECK_EQ(cuArrayDestroy(b), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 0);
}

static void unknown_pointers_are_forwarded_to_the_driver(void)
{
	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemFree_v2(0xdead000), CUDA_ERROR_INVALID_VALUE); /* the fake's answer */
	CHECK_EQ(cuMemFree_v2(0), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 0);
}

static void each_device_has_its_own_limit(void)
{
	CUdeviceptr a = 0, b = 0;
	size_t f = 0, t = 0;

	CHECK(ctx_on(1) == 0);
	CHECK_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
	CHECK_EQ(t, 256 * MiB);
	CHECK_EQ(cuMemAlloc_v2(&a, 200 * MiB), CUDA_SUCCESS);
	CHECK_EQ(cuMemAlloc_v2(&b, 100 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemAlloc_v2(&b, 900 * MiB), CUDA_SUCCESS); /* device 0 is untouched */
	CHECK_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
	CHECK_EQ(cuMemFree_v2(a), CUDA_SUCCESS); /* freed from another context: still uncharged */
	CHECK(ctx_on(1) == 0);
	CHECK_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
	CHECK_EQ(f, 256 * MiB);
}

static void nvml_reports_the_container_view(void)
{
	nvmlDevice_t d0, d1;
	nvmlMemory_t m;
	nvmlMemory_v2_t m2 = {0};
	CUdeviceptr p = 0;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(nvmlInit_v2(), NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &d0), NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(1, &d1), NVML_SUCCESS);
	CHECK_EQ(cuMemAlloc_v2(&p, 300 * MiB), CUDA_SUCCESS);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(d0, &m), NVML_SUCCESS);
	CHECK_EQ(m.total, GiB);
	CHECK_EQ(m.used, 300 * MiB);
	CHECK_EQ(m.free, GiB - 300 * MiB);
	m2.version = nvmlMemory_v2;
	CHECK_EQ(nvmlDeviceGetMemoryInfo_v2(d0, &m2), NVML_SUCCESS);
	CHECK_EQ(m2.total, GiB);
	CHECK_EQ(m2.used, 300 * MiB);
	CHECK_EQ(m2.free, GiB - 300 * MiB);
	CHECK_EQ(m2.reserved, 0);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(d1, &m), NVML_SUCCESS);
	CHECK_EQ(m.total, 256 * MiB);
	CHECK_EQ(m.free, 256 * MiB);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(d0, NULL), NVML_ERROR_INVALID_ARGUMENT);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

/* Run with CUDA_VISIBLE_DEVICES=1,0, CUDA_DEVICE_MEMORY_LIMIT_0=256m, _1=1Gi: CUDA ordinal 0 is
 * the machine's device 1. Limits follow CUDA ordinals, NVML numbers the machine's way, and both
 * views agree because devices are matched by UUID (HAMi-core #225/#319). */
static void reordered_devices_keep_their_limits(void)
{
	nvmlDevice_t n0, n1;
	nvmlMemory_t m;
	CUdeviceptr p = 0;
	size_t f, t;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
	CHECK_EQ(t, 256 * MiB);
	CHECK_EQ(cuMemAlloc_v2(&p, 100 * MiB), CUDA_SUCCESS);
	CHECK_EQ(fake_cuda_memory_used(1), 100 * MiB); /* it landed on the machine's device 1 */
	CHECK_EQ(nvmlInit_v2(), NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(0, &n0), NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetHandleByIndex_v2(1, &n1), NVML_SUCCESS);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(n1, &m), NVML_SUCCESS);
	CHECK_EQ(m.total, 256 * MiB);
	CHECK_EQ(m.used, 100 * MiB);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(n0, &m), NVML_SUCCESS);
	CHECK_EQ(m.total, GiB);
	CHECK_EQ(m.used, 0);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

/* ---- graph memory nodes: charged to the node's device when the node is made ---- */
static CUDA_MEM_ALLOC_NODE_PARAMS graph_alloc_on(int dev, size_t bytes)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p;

	memset(&p, 0, sizeof(p));
	p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.poolProps.location.id = dev;
	p.bytesize = bytes;
	return p;
}

/* A memory node takes its memory at instantiation or launch, where no allocation call of ours
 * runs: past the share it is refused when it is added, and on its own device (1: 256 MiB) even
 * from device 0's context. */
static void a_graph_memory_node_past_the_limit_is_refused(void)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p = graph_alloc_on(0, GiB + 1);
	CUgraphNodeParams generic;
	CUgraphNode node;
	CUdeviceptr a = 0;
	CUgraph g = NULL;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
	CHECK_EQ(cuGraphAddMemAllocNode(&node, g, NULL, 0, &p), CUDA_ERROR_OUT_OF_MEMORY);
	p = graph_alloc_on(1, 512 * MiB);
	CHECK_EQ(cuGraphAddMemAllocNode(&node, g, NULL, 0, &p), CUDA_ERROR_OUT_OF_MEMORY);
	memset(&generic, 0, sizeof(generic));
	generic.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
	generic.alloc = graph_alloc_on(0, GiB + 1);
	CHECK_EQ(cuGraphAddNode(&node, g, NULL, 0, &generic), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(fake_cuda_memory_used(0) + fake_cuda_memory_used(1), 0);
	p = graph_alloc_on(0, GiB);
	CHECK_EQ(cuGraphAddMemAllocNode(&node, g, NULL, 0, &p), CUDA_SUCCESS);
	CHECK_EQ(used_now(), GiB);
	CHECK_EQ(cuMemAlloc_v2(&a, 1), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 0);
}

/* Within the share: charged from the node's making until neither the graph nor its executable
 * graph is left (the executable graph outlives the graph and may still launch), through
 * cuGraphAddNode too; the graph memory the driver keeps cached is trimmed when it goes. */
static void graph_memory_is_charged_until_the_graph_and_its_executable_graph_are_gone(void)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p = graph_alloc_on(0, 300 * MiB);
	CUgraphNodeParams generic;
	unsigned long trims = fake_cuda_graph_trims(0);
	CUgraphNode node;
	CUgraphExec exec = NULL;
	CUgraph g = NULL;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
	CHECK_EQ(cuGraphAddMemAllocNode(&node, g, NULL, 0, &p), CUDA_SUCCESS);
	CHECK_EQ(cuGraphAddMemFreeNode(&node, g, &node, 1, p.dptr), CUDA_SUCCESS);
	memset(&generic, 0, sizeof(generic));
	generic.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
	generic.alloc = graph_alloc_on(0, 200 * MiB);
	CHECK_EQ(cuGraphAddNode(&node, g, NULL, 0, &generic), CUDA_SUCCESS);
	generic.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
	generic.free.dptr = generic.alloc.dptr;
	CHECK_EQ(cuGraphAddNode(&node, g, &node, 1, &generic), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 500 * MiB);
	CHECK_EQ(cuGraphInstantiateWithFlags(&exec, g, 0), CUDA_SUCCESS);
	CHECK_EQ(cuGraphLaunch(exec, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 500 * MiB);
	CHECK_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 0);
	CHECK(fake_cuda_graph_trims(0) > trims);
	CHECK_EQ(fake_cuda_memory_used(0), 0);
}

/* A node whose memory its graph does not free outlives a launch: it stays charged after the
 * graph and its executable graph are gone, until cuMemFree/cuMemFreeAsync frees it. */
static void graph_memory_a_launch_left_behind_stays_charged_until_freed(void)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p = graph_alloc_on(0, 300 * MiB);
	CUgraphNode node;
	CUgraphExec exec = NULL;
	CUgraph g = NULL;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
	CHECK_EQ(cuGraphAddMemAllocNode(&node, g, NULL, 0, &p), CUDA_SUCCESS);
	CHECK_EQ(cuGraphInstantiateWithFlags(&exec, g, 0), CUDA_SUCCESS);
	CHECK_EQ(cuGraphLaunch(exec, NULL), CUDA_SUCCESS);
	CHECK_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
	CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 300 * MiB);
	CHECK_EQ(fake_cuda_memory_used(0), 300 * MiB);
	CHECK_EQ(cuMemFreeAsync(p.dptr, NULL), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 0);
	CHECK_EQ(fake_cuda_memory_used(0), 0);
}

/* Under stream capture, cuMemAllocAsync makes a memory node of the capture's graph (no memory
 * yet) and cuMemFreeAsync a free node: the charge is the graph's, not released by the captured
 * free (that left every launch's memory uncharged), until the graph and its executable are gone. */
static void a_captured_allocation_is_charged_as_its_graphs_memory_node(void)
{
	CUdeviceptr a = 0, b = 0;
	CUgraphExec exec = NULL;
	CUstream s = NULL;
	CUgraph g = NULL;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
	CHECK_EQ(cuStreamBeginCapture_v2(s, 0), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocAsync(&a, 300 * MiB, s), CUDA_SUCCESS);
	CHECK_EQ(cuMemAllocAsync(&b, GiB, s), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(cuMemFreeAsync(a, s), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 300 * MiB);
	CHECK_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
	CHECK_EQ(cuGraphInstantiateWithFlags(&exec, g, 0), CUDA_SUCCESS);
	CHECK_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
	CHECK_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 300 * MiB);
	CHECK_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
	CHECK_EQ(used_now(), 0);
	CHECK_EQ(fake_cuda_memory_used(0), 0);
	CHECK_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

int main(int argc, char **argv)
{
	static const struct check_case cases[] = {
		CASE(memory_info_shows_the_limit),
		CASE(the_whole_limit_is_usable_and_not_a_byte_more),
		CASE(allocations_are_rounded_to_the_granularity),
		CASE(a_failed_driver_call_leaves_no_charge),
		CASE(no_context_is_the_driver_error),
		CASE(pitch_is_charged_as_the_driver_laid_it_out),
		CASE(managed_async_and_pool_allocations_count),
		CASE(ptsz_variants_count_too),
		CASE(async_allocations_are_charged_to_the_streams_device),
		CASE(pool_allocations_are_charged_to_the_pools_device),
		CASE(an_async_allocation_without_a_current_context_is_charged_to_the_stream),
		CASE(vmm_device_memory_counts_host_memory_does_not),
		CASE(a_graph_memory_node_past_the_limit_is_refused),
		CASE(graph_memory_is_charged_until_the_graph_and_its_executable_graph_are_gone),
		CASE(graph_memory_a_launch_left_behind_stays_charged_until_freed),
		CASE(a_captured_allocation_is_charged_as_its_graphs_memory_node),
		CASE(arrays_count),
		CASE(unknown_pointers_are_forwarded_to_the_driver),
		CASE(each_device_has_its_own_limit),
		CASE(nvml_reports_the_container_view),
		CASE(reordered_devices_keep_their_limits),
	};
	return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
