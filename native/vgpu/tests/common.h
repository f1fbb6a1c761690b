/* Shared by the test programs: the driver entry points they call, declared from our ABI. */
#ifndef TEST_COMMON_H
#define TEST_COMMON_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"
#include "check.h"
#include "fake/fake.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

CUresult cuInit(unsigned int);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSynchronize(void);
CUresult cuCtxGetDevice(CUdevice *);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned int);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
		     unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemPoolCreate(CUmemoryPool *, const CUmemPoolProps *);
CUresult cuMemPoolDestroy(CUmemoryPool);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *, CUdevice);
CUresult cuStreamCreate(CUstream *, unsigned int);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuArrayCreate_v2(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
CUresult cuArray3DCreate_v2(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
CUresult cuArrayDestroy(CUarray);
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t,
			     CUdriverProcAddressQueryResult *);
CUresult cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
			unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
CUresult cuLaunchKernelEx(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned int, unsigned int, unsigned int,
				   unsigned int, unsigned int, unsigned int, unsigned int, CUstream,
				   void **);
CUresult cuGraphLaunch(CUgraphExec, CUstream);
CUresult cuGraphCreate(CUgraph *, unsigned int);
CUresult cuGraphDestroy(CUgraph);
CUresult cuGraphAddMemAllocNode(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
				CUDA_MEM_ALLOC_NODE_PARAMS *);
CUresult cuGraphAddMemFreeNode(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUdeviceptr);
CUresult cuGraphAddNode(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraphNodeParams *);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *, CUgraph, unsigned long long);
CUresult cuGraphExecDestroy(CUgraphExec);
CUresult cuStreamBeginCapture_v2(CUstream, int);
CUresult cuStreamEndCapture(CUstream, CUgraph *);
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t *);

#define FAKE_KERNEL ((CUfunction)(uintptr_t)0x1000)

/* cuLaunchKernel's per-thread-stream flavour, as cuGetProcAddress hands it out. */
typedef CUresult (*launch_ptsz_fn)(CUfunction, unsigned int, unsigned int, unsigned int,
				   unsigned int, unsigned int, unsigned int, unsigned int, CUstream,
				   void **, void **);

/* One launch of the fake kernel by `kind`: "kernel", "ptsz" (through `ptsz`), "ex", "coop" or
 * "graph" (anything else launches "kernel"). */
static inline CUresult launch_kind(const char *kind, launch_ptsz_fn ptsz)
{
	CUlaunchConfig cfg = {64, 1, 1, 256, 1, 1, 0, NULL, NULL, 0};

	if (strcmp(kind, "ptsz") == 0)
		return ptsz(FAKE_KERNEL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
	if (strcmp(kind, "ex") == 0)
		return cuLaunchKernelEx(&cfg, FAKE_KERNEL, NULL, NULL);
	if (strcmp(kind, "coop") == 0)
		return cuLaunchCooperativeKernel(FAKE_KERNEL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL);
	if (strcmp(kind, "graph") == 0)
		return cuGraphLaunch((CUgraphExec)(uintptr_t)0x2000, NULL);
	return cuLaunchKernel(FAKE_KERNEL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
}

/* cuInit + a current context on device `dev`; 0 on success. */
static inline int ctx_on(int dev)
{
	CUcontext ctx;
	CUdevice d;

	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&d, dev) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, d) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return -1;
	return 0;
}

static inline size_t free_mem(void)
{
	size_t f = 0, t = 0;
	return cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS ? f : (size_t)-1;
}

static inline size_t total_mem(void)
{
	size_t f = 0, t = 0;
	return cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS ? t : (size_t)-1;
}

#endif
