/*
 * Our own declarations of the parts of the CUDA driver and NVML ABI that libvgpu and its fake
 * driver use. Written from the public API documentation; no CUDA headers are needed to build.
 * Only values and layouts that cross the ABI are declared here; keep them exact.
 */
#ifndef VGPU_ABI_H
#define VGPU_ABI_H

#include <stddef.h>
#include <stdint.h>

/* ---- CUDA driver API ---- */
typedef int CUresult;
enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_PERMITTED = 800,
	CUDA_ERROR_NOT_SUPPORTED = 801,
	CUDA_ERROR_UNKNOWN = 999,
};

typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long cuuint64_t;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUfunc_st *CUfunction;
typedef struct CUarray_st *CUarray;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUlaunchAttribute_st CUlaunchAttribute; /* only passed through by pointer */
typedef struct CUexecAffinityParam_st CUexecAffinityParam; /* likewise */
typedef struct CUctxCreateParams_st CUctxCreateParams;     /* likewise */
typedef struct CUgreenCtx_st *CUgreenCtx;
/* The special stream handles: each means the calling thread's current context. */
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
typedef struct { char bytes[16]; } CUuuid;

typedef enum {
	CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
	CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
} CUdevice_attribute;

typedef enum {
	CU_MEM_LOCATION_TYPE_INVALID = 0,
	CU_MEM_LOCATION_TYPE_DEVICE = 1,
	CU_MEM_LOCATION_TYPE_HOST = 2,
	CU_MEM_LOCATION_TYPE_HOST_NUMA = 3,
	CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 4,
} CUmemLocationType;

typedef enum {
	CU_MEM_ALLOCATION_TYPE_PINNED = 1,
	CU_MEM_ALLOCATION_TYPE_MANAGED = 2,
} CUmemAllocationType;
typedef enum { CU_MEM_HANDLE_TYPE_NONE = 0 } CUmemAllocationHandleType;
typedef enum {
	CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
	CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1,
} CUmemAllocationGranularity_flags;

typedef struct {
	CUmemLocationType type;
	int id;
} CUmemLocation;

typedef struct {
	CUmemAllocationType type;
	CUmemAllocationHandleType requestedHandleTypes;
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

/* cuMemPoolCreate's properties: allocations from the pool reside at `location`. (CUDA 11.2 had
 * reserved[64] after win32SecurityAttributes; maxSize and usage came out of it: same size.) */
typedef struct {
	CUmemAllocationType allocType;
	CUmemAllocationHandleType handleTypes;
	CUmemLocation location;
	void *win32SecurityAttributes;
	size_t maxSize;
	unsigned short usage;
	unsigned char reserved[54];
} CUmemPoolProps;

/* ---- graphs: memory nodes (the rest of a graph passes through untouched) ---- */
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphEdgeData_st CUgraphEdgeData; /* only passed through by pointer */
typedef struct CUDA_GRAPH_INSTANTIATE_PARAMS_st CUDA_GRAPH_INSTANTIATE_PARAMS; /* likewise */

typedef struct {
	CUmemLocation location;
	unsigned long long flags; /* CUmemAccess_flags */
} CUmemAccessDesc;

/* cuGraphAddMemAllocNode's parameters: `bytesize` bytes at poolProps.location, the address out
 * in dptr (fixed at the node's creation; the memory is mapped at instantiation or launch). */
typedef struct {
	CUmemPoolProps poolProps;
	const CUmemAccessDesc *accessDescs;
	size_t accessDescCount;
	size_t bytesize;
	CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS;

typedef enum {
	CU_STREAM_CAPTURE_STATUS_NONE = 0,
	CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
	CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,
} CUstreamCaptureStatus;

typedef enum {
	CU_GRAPH_NODE_TYPE_MEM_ALLOC = 10,
	CU_GRAPH_NODE_TYPE_MEM_FREE = 11,
} CUgraphNodeType;

/* cuGraphAddNode's parameters (CUDA 12.2): a type, then a union padded to 29 long longs. Only
 * the memory node members are declared; the padding keeps the layout exact. */
typedef struct {
	CUgraphNodeType type;
	int reserved0[3];
	union {
		long long reserved1[29];
		CUDA_MEM_ALLOC_NODE_PARAMS alloc;
		struct {
			CUdeviceptr dptr;
		} free;
	};
	long long reserved2;
} CUgraphNodeParams;

typedef enum {
	CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
	CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
	CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
	CU_AD_FORMAT_SIGNED_INT8 = 0x08,
	CU_AD_FORMAT_SIGNED_INT16 = 0x09,
	CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
	CU_AD_FORMAT_HALF = 0x10,
	CU_AD_FORMAT_FLOAT = 0x20,
} CUarray_format;

typedef struct {
	size_t Width;
	size_t Height;
	CUarray_format Format;
	unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct {
	size_t Width;
	size_t Height;
	size_t Depth;
	CUarray_format Format;
	unsigned int NumChannels;
	unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

typedef struct {
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	CUstream hStream;
	CUlaunchAttribute *attrs;
	unsigned int numAttrs;
} CUlaunchConfig;

/* cuGetProcAddress flags and status */
enum {
	CU_GET_PROC_ADDRESS_DEFAULT = 0,
	CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1 << 0,
	CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1,
};
typedef enum {
	CU_GET_PROC_ADDRESS_SUCCESS = 0,
	CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
	CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
} CUdriverProcAddressQueryResult;

/* ---- NVML ---- */
typedef int nvmlReturn_t;
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_FUNCTION_NOT_FOUND = 13,
	NVML_ERROR_UNKNOWN = 999,
};
typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

typedef struct {
	unsigned int version;
	unsigned long long total;
	unsigned long long reserved;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_v2_t;
#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24U))
#define nvmlMemory_v2 NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2)

typedef struct {
	unsigned int gpu;
	unsigned int memory;
} nvmlUtilization_t;

typedef struct {
	unsigned int pid;
	unsigned long long timeStamp; /* CPU timestamp, microseconds */
	unsigned int smUtil;
	unsigned int memUtil;
	unsigned int encUtil;
	unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96

#endif
