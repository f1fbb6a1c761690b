/*
 * GPU check driver for tests/gpu/run.sh: uses only the CUDA driver API (libcuda.so.1) and NVML,
 * with a PTX kernel JIT-compiled by the driver, so no CUDA toolkit or PyTorch is needed.
 *   gpu_check info                    total/free as CUDA and NVML report them (bytes)
 *   gpu_check alloc BYTES             exit 0 if allocated, 2 if CUDA_ERROR_OUT_OF_MEMORY
 *   gpu_check async BYTES stream|pool cuMemAllocAsync on a stream of device 0 (or
 *                                     cuMemAllocFromPoolAsync from a pool made on device 0) with
 *                                     no context current: exit 0 if allocated, 2 if OOM, 3 if
 *                                     the driver wants a current context for it
 *   gpu_check graph BYTES node|capture  a graph memory node of BYTES on device 0, added by
 *                                     cuGraphAddMemAllocNode or by capturing cuMemAllocAsync;
 *                                     instantiated, launched and destroyed: exit 0 if it ran, 2
 *                                     if refused with CUDA_ERROR_OUT_OF_MEMORY
 *   gpu_check hold BYTES SECONDS      allocate, print "held", keep the GPU busy, exit 0 if fine
 *   gpu_check throughput SECONDS      busy-kernel throughput, kernels/s after a 5 s warm-up (SM controller settles)
 *   gpu_check launch N                launch cost of an empty kernel, ns/launch
 *   gpu_check progress SECONDS        busy kernels for SECONDS after setup; prints "<CLOCK_BOOTTIME s>
 *                                     <kernels done>" at start, after setup, then every >= 100 ms
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "abi.h"

typedef struct CUmod_st *CUmodule;
CUresult cuInit(unsigned int);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDeviceGetAttribute(int *, CUdevice_attribute, CUdevice);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSynchronize(void);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuStreamCreate(CUstream *, unsigned int);
CUresult cuStreamSynchronize(CUstream);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemPoolCreate(CUmemoryPool *, const CUmemPoolProps *);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuGraphCreate(CUgraph *, unsigned int);
CUresult cuGraphAddMemAllocNode(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
				CUDA_MEM_ALLOC_NODE_PARAMS *);
CUresult cuGraphAddMemFreeNode(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *, CUgraph, unsigned long long);
CUresult cuGraphLaunch(CUgraphExec, CUstream);
CUresult cuGraphExecDestroy(CUgraphExec);
CUresult cuGraphDestroy(CUgraph);
CUresult cuStreamBeginCapture_v2(CUstream, int);
CUresult cuStreamEndCapture(CUstream, CUgraph *);
CUresult cuModuleLoadData(CUmodule *, const void *);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);
CUresult cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
			unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);

/* out[tid] = a chain of `iters` dependent FMAs: keeps every SM busy for a predictable time. */
static const char ptx[] =
	".version 7.0\n"
	".target sm_70\n"
	".address_size 64\n"
	".visible .entry spin(.param .u64 out, .param .u32 iters)\n"
	"{\n"
	"  .reg .pred p;\n"
	"  .reg .f32 a, b;\n"
	"  .reg .u32 i, n, t, blk, dim;\n"
	"  .reg .u64 addr, off;\n"
	"  ld.param.u64 addr, [out];\n"
	"  cvta.to.global.u64 addr, addr;\n"
	"  ld.param.u32 n, [iters];\n"
	"  mov.u32 t, %tid.x;\n"
	"  mov.u32 blk, %ctaid.x;\n"
	"  mov.u32 dim, %ntid.x;\n"
	"  mad.lo.u32 t, blk, dim, t;\n"
	"  cvt.rn.f32.u32 a, t;\n"
	"  mov.f32 b, 0f3F7FFFFE;\n"
	"  mov.u32 i, 0;\n"
	"  setp.eq.u32 p, n, 0;\n"
	"  @p bra DONE;\n"
	"LOOP:\n"
	"  fma.rn.f32 a, a, b, b;\n"
	"  add.u32 i, i, 1;\n"
	"  setp.lt.u32 p, i, n;\n"
	"  @p bra LOOP;\n"
	"DONE:\n"
	"  mul.wide.u32 off, t, 4;\n"
	"  add.u64 addr, addr, off;\n"
	"  st.global.f32 [addr], a;\n"
	"  ret;\n"
	"}\n";

static CUfunction fn;
static CUdeviceptr out;
static unsigned int blocks = 1;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* one clock for every process on the node, as the priority board's */
static double boot_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define TRY(call)                                                                                  \
	do {                                                                                       \
		CUresult r_ = (call);                                                              \
		if (r_ != CUDA_SUCCESS) {                                                          \
			fprintf(stderr, "gpu_check: %s = %d\n", #call, r_);                        \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static void setup(int kernel)
{
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	int sms = 1;

	TRY(cuInit(0));
	TRY(cuDeviceGet(&dev, 0));
	TRY(cuDevicePrimaryCtxRetain(&ctx, dev));
	TRY(cuCtxSetCurrent(ctx));
	if (!kernel)
		return;
	TRY(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
	blocks = (unsigned int)sms * 8;
	TRY(cuModuleLoadData(&mod, ptx));
	TRY(cuModuleGetFunction(&fn, mod, "spin"));
	TRY(cuMemAlloc_v2(&out, (size_t)blocks * 256 * 4));
}

static CUresult spin(unsigned int iters, unsigned int nblocks)
{
	void *args[] = {&out, &iters};
	return cuLaunchKernel(fn, nblocks, 1, 1, 256, 1, 1, 0, NULL, args, NULL);
}

/* iterations for a ~2 ms kernel on this GPU */
static unsigned int calibrate(void)
{
	unsigned int iters = 1000;
	for (;;) {
		double t0 = now_s();
		TRY(spin(iters, blocks));
		TRY(cuCtxSynchronize());
		double dt = now_s() - t0;
		if (dt > 0.002 || iters > (1u << 28))
			return dt > 0.004 ? iters / 2 : iters;
		iters *= 2;
	}
}

/* Stream-ordered memory is charged to the stream's (or pool's) device even with no context
 * current: `how` is "stream" (cuMemAllocAsync) or "pool" (a pool made on device 0). */
static int async_alloc(size_t bytes, const char *how)
{
	CUmemPoolProps props = {0};
	CUmemoryPool pool = NULL;
	CUdeviceptr p = 0;
	CUstream s;
	CUresult r;

	setup(0);
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = 0;
	TRY(cuStreamCreate(&s, 0));
	if (strcmp(how, "pool") == 0)
		TRY(cuMemPoolCreate(&pool, &props));
	TRY(cuCtxSetCurrent(NULL));
	r = pool ? cuMemAllocFromPoolAsync(&p, bytes, pool, s) : cuMemAllocAsync(&p, bytes, s);
	printf("async %s %zu: %d\n", how, bytes, r);
	if (r == CUDA_SUCCESS) {
		TRY(cuMemFreeAsync(p, s));
		TRY(cuStreamSynchronize(s));
	}
	if (r == CUDA_ERROR_INVALID_CONTEXT)
		return 3;
	return r == CUDA_SUCCESS ? 0 : r == CUDA_ERROR_OUT_OF_MEMORY ? 2 : 1;
}

/* A graph whose one memory node (freed in the graph) is `bytes` on device 0: `how` is "node"
 * (cuGraphAddMemAllocNode) or "capture" (cuMemAllocAsync/cuMemFreeAsync under stream capture,
 * relaxed mode). Refused when added, or instantiated, launched twice and destroyed. */
static int graph_alloc(size_t bytes, const char *how)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	CUgraphNode alloc, freed;
	CUgraphExec exec;
	CUgraph g = NULL;
	CUstream s;
	CUresult r;

	setup(0);
	TRY(cuStreamCreate(&s, 0));
	memset(&p, 0, sizeof(p));
	p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.bytesize = bytes;
	if (strcmp(how, "capture") == 0) {
		TRY(cuStreamBeginCapture_v2(s, 2 /* CU_STREAM_CAPTURE_MODE_RELAXED */));
		r = cuMemAllocAsync(&p.dptr, bytes, s);
		if (r == CUDA_SUCCESS)
			TRY(cuMemFreeAsync(p.dptr, s));
		TRY(cuStreamEndCapture(s, &g));
	} else {
		TRY(cuGraphCreate(&g, 0));
		r = cuGraphAddMemAllocNode(&alloc, g, NULL, 0, &p);
		if (r == CUDA_SUCCESS)
			TRY(cuGraphAddMemFreeNode(&freed, g, &alloc, 1, p.dptr));
	}
	printf("graph %s %zu: %d\n", how, bytes, r);
	if (r == CUDA_SUCCESS) {
		TRY(cuGraphInstantiateWithFlags(&exec, g, 0));
		TRY(cuGraphLaunch(exec, s));
		TRY(cuGraphLaunch(exec, s));
		TRY(cuStreamSynchronize(s));
		TRY(cuGraphExecDestroy(exec));
	}
	TRY(cuGraphDestroy(g));
	return r == CUDA_SUCCESS ? 0 : r == CUDA_ERROR_OUT_OF_MEMORY ? 2 : 1;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";

	if (strcmp(cmd, "info") == 0) {
		size_t f = 0, t = 0, tm = 0;
		nvmlDevice_t d;
		nvmlMemory_t m = {0};
		setup(0);
		TRY(cuMemGetInfo_v2(&f, &t));
		TRY(cuDeviceTotalMem_v2(&tm, 0));
		if (nvmlInit_v2() == NVML_SUCCESS && nvmlDeviceGetHandleByIndex_v2(0, &d) == NVML_SUCCESS)
			nvmlDeviceGetMemoryInfo(d, &m);
		printf("cuda_total %zu cuda_free %zu device_total %zu nvml_total %llu nvml_used %llu\n",
		       t, f, tm, m.total, m.used);
		return 0;
	}
	if (strcmp(cmd, "alloc") == 0 && argc > 2) {
		CUdeviceptr p;
		setup(0);
		CUresult r = cuMemAlloc_v2(&p, strtoull(argv[2], NULL, 10));
		printf("alloc %s: %d\n", argv[2], r);
		return r == CUDA_SUCCESS ? 0 : r == CUDA_ERROR_OUT_OF_MEMORY ? 2 : 1;
	}
	if (strcmp(cmd, "async") == 0 && argc > 3)
		return async_alloc(strtoull(argv[2], NULL, 10), argv[3]);
	if (strcmp(cmd, "graph") == 0 && argc > 3)
		return graph_alloc(strtoull(argv[2], NULL, 10), argv[3]);
	if (strcmp(cmd, "hold") == 0 && argc > 3) {
		CUdeviceptr p;
		setup(1);
		TRY(cuMemAlloc_v2(&p, strtoull(argv[2], NULL, 10)));
		printf("held\n");
		fflush(stdout);
		unsigned int iters = calibrate();
		double end = now_s() + atof(argv[3]);
		while (now_s() < end) {
			TRY(spin(iters, blocks));
			TRY(cuCtxSynchronize());
		}
		printf("hold done\n");
		return 0;
	}
	if (strcmp(cmd, "throughput") == 0 && argc > 2) {
		setup(1);
		unsigned int iters = calibrate();
		double warm = now_s() + 5, end = warm + atof(argv[2]), t0 = 0;
		long n = 0;
		int measuring = 0;
		for (;;) {
			double t = now_s();
			if (!measuring && t >= warm) {
				TRY(cuCtxSynchronize());
				t0 = now_s();
				n = 0;
				measuring = 1;
			}
			if (t >= end)
				break;
			for (int k = 0; k < 8; k++, n++)
				TRY(spin(iters, blocks));
			TRY(cuCtxSynchronize());
		}
		printf("%.3f\n", (double)n / (now_s() - t0));
		return 0;
	}
	if (strcmp(cmd, "launch") == 0 && argc > 2) {
		long n = atol(argv[2]);
		setup(1);
		for (int i = 0; i < 1000; i++)
			TRY(spin(0, 1));
		TRY(cuCtxSynchronize());
		double t0 = now_s();
		for (long i = 0; i < n; i++)
			TRY(spin(0, 1));
		TRY(cuCtxSynchronize());
		printf("%.1f\n", (now_s() - t0) * 1e9 / (double)n);
		return 0;
	}
	if (strcmp(cmd, "progress") == 0 && argc > 2) {
		long n = 0;
		printf("%.3f 0\n", boot_s()); /* before the driver is touched */
		setup(1);
		unsigned int iters = calibrate();
		double t = boot_s(), end = t + atof(argv[2]), next = t;
		while (t < end) {
			if (t >= next) {
				printf("%.3f %ld\n", t, n);
				fflush(stdout);
				next = t + 0.1;
			}
			for (int k = 0; k < 8; k++, n++)
				TRY(spin(iters, blocks));
			TRY(cuCtxSynchronize());
			t = boot_s();
		}
		printf("%.3f %ld\n", t, n);
		return 0;
	}
	fprintf(stderr, "usage: gpu_check info|alloc B|async B stream|pool|graph B node|capture|hold B S|throughput S|"
			"launch N|progress S\n");
	return 64;
}
