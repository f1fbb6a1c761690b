/* Fake libcuda.so.1 (see fake.h). Implements the driver API libvgpu and its tests use. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "fake.h"

#define EXPORT __attribute__((visibility("default")))

struct mem {
	uint64_t addr, size;
	int dev, kind; /* kind: 1 device, 2 managed, 3 VMM handle, 4 array, 5 host VMM, 6 host pool,
			* 7 a graph's memory node */
	struct mem *next;
};

struct busy_seg {
	uint64_t start, end;
	uint32_t pid; /* host pid of the launching process */
};

#define NSEG 8192
struct device {
	uint64_t used;
	uint64_t busy_until;
	uint64_t busy_total;
	uint64_t launches;
	struct busy_seg seg[NSEG]; /* ring of merged busy intervals */
	unsigned int nseg, head;
};

static struct {
	int initialised;
	int ndev;                     /* devices CUDA shows (after CUDA_VISIBLE_DEVICES) */
	int nphys;                    /* devices there are (what NVML shows) */
	int phys[FAKE_MAX_DEVICES];   /* CUDA ordinal → physical index */
	uint64_t memory, granularity;
	int sm_count, graph_kernels, queue, proc_internal, fast_alloc;
	uint64_t kernel_ns;
} cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
/* The GPU: process-local, or shared by every process naming the same FAKE_GPU_STATE file, so
 * that their kernels queue on one device and NVML sees all of them. */
struct gpu {
	pthread_mutex_t lock;
	struct device dev[FAKE_MAX_DEVICES];
};
static struct gpu local_gpu = {.lock = PTHREAD_MUTEX_INITIALIZER};
static struct gpu *gpu = &local_gpu;
#define mu (gpu->lock)
#define devs (gpu->dev)
static struct mem *mems;
static __thread int current = -1; /* device of the thread's current context (the stack's top) */
#define CTX_STACK 8
static __thread int ctx_below[CTX_STACK]; /* the rest of the thread's context stack */
static __thread int ctx_depth;
#define KIND(k) (1 << (k))
#define HOST_KINDS (KIND(5) | KIND(6))

static void read_cfg(void)
{
	cfg.nphys = fake_device_count();
	/* CUDA_VISIBLE_DEVICES (indices only) selects and renumbers devices for CUDA, not for NVML */
	const char *vis = getenv("CUDA_VISIBLE_DEVICES");
	cfg.ndev = 0;
	for (const char *p = vis; p && *p && cfg.ndev < FAKE_MAX_DEVICES;) {
		char *end;
		long i = strtol(p, &end, 10);
		if (end == p || i < 0 || i >= cfg.nphys)
			break;
		cfg.phys[cfg.ndev++] = (int)i;
		p = *end == ',' ? end + 1 : end;
	}
	if (vis == NULL) {
		for (int i = 0; i < cfg.nphys; i++)
			cfg.phys[i] = i;
		cfg.ndev = cfg.nphys;
	}
	cfg.memory = fake_env_bytes("FAKE_CUDA_MEMORY", 16ULL << 30);
	cfg.sm_count = (int)fake_env_bytes("FAKE_CUDA_SM_COUNT", 132);
	cfg.kernel_ns = fake_env_bytes("FAKE_CUDA_KERNEL_US", 0) * 1000;
	cfg.graph_kernels = (int)fake_env_bytes("FAKE_CUDA_GRAPH_KERNELS", 4);
	cfg.queue = (int)fake_env_bytes("FAKE_CUDA_QUEUE", 64);
	cfg.granularity = fake_env_bytes("FAKE_CUDA_GRANULARITY", 2ULL << 20);
	cfg.proc_internal = (int)fake_env_bytes("FAKE_CUDA_PROC_INTERNAL", 0);
	cfg.fast_alloc = (int)fake_env_bytes("FAKE_CUDA_FAST_ALLOC", 0);
	const char *state = getenv("FAKE_GPU_STATE");
	if (state && *state) {
		int fd = open(state, O_RDWR | O_CREAT, 0666);
		struct stat st;
		void *p;
		if (fd < 0 || flock(fd, LOCK_EX) < 0 || fstat(fd, &st) < 0)
			abort();
		if (st.st_size == 0 && ftruncate(fd, sizeof(struct gpu)) < 0)
			abort();
		p = mmap(NULL, sizeof(struct gpu), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			abort();
		if (st.st_size == 0) {
			pthread_mutexattr_t a;
			pthread_mutexattr_init(&a);
			pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
			pthread_mutex_init(&((struct gpu *)p)->lock, &a);
		}
		flock(fd, LOCK_UN);
		close(fd);
		gpu = p;
	}
}

static void config(void)
{
	pthread_once(&cfg_once, read_cfg);
}

#define PHYS(ordinal) (cfg.phys[(ordinal)])

EXPORT uint64_t fake_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
	uint64_t now = fake_now_ns();
	struct timespec ts;

	if (t <= now)
		return;
	ts.tv_sec = (time_t)((t - now) / 1000000000ULL);
	ts.tv_nsec = (long)((t - now) % 1000000000ULL);
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

#define CHECK_INIT()                                                                               \
	do {                                                                                       \
		if (!cfg.initialised)                                                              \
			return CUDA_ERROR_NOT_INITIALIZED;                                         \
	} while (0)
#define CHECK_CTX()                                                                                \
	do {                                                                                       \
		CHECK_INIT();                                                                      \
		if (current < 0)                                                                   \
			return CUDA_ERROR_INVALID_CONTEXT;                                         \
	} while (0)

/* ---- init, devices, contexts ---- */
EXPORT CUresult cuInit(unsigned int flags)
{
	config();
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	cfg.initialised = 1;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
	if (v == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*v = 12040;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count)
{
	CHECK_INIT();
	if (count == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*count = cfg.ndev;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	CHECK_INIT();
	if (device == NULL || ordinal < 0 || ordinal >= cfg.ndev)
		return device == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	CHECK_INIT();
	if (pi == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= cfg.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
		*pi = cfg.sm_count;
		return CUDA_SUCCESS;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
		*pi = 2048;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* The physical device's UUID (fake.h; fake NVML formats the same bytes). */
EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	unsigned char b[16];

	CHECK_INIT();
	if (uuid == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= cfg.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	fake_uuid_bytes(PHYS(dev), b);
	memcpy(uuid->bytes, b, 16);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	CHECK_INIT();
	if (bytes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= cfg.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	*bytes = cfg.memory;
	return CUDA_SUCCESS;
}

/* A context is its device ordinal + 1. */
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CHECK_INIT();
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= cfg.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	*pctx = (CUcontext)(uintptr_t)(dev + 1);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	CHECK_INIT();
	int dev = (int)(uintptr_t)ctx - 1;
	if (ctx != NULL && (dev < 0 || dev >= cfg.ndev))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx != NULL)
		current = dev; /* replaces the top of the stack */
	else
		current = ctx_depth > 0 ? ctx_below[--ctx_depth] : -1; /* pops it */
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	CHECK_INIT();
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = current < 0 ? NULL : (CUcontext)(uintptr_t)(current + 1);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	int dev = (int)(uintptr_t)ctx - 1;

	CHECK_INIT();
	if (ctx == NULL || dev < 0 || dev >= cfg.ndev)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (current >= 0) {
		if (ctx_depth == CTX_STACK)
			return CUDA_ERROR_OUT_OF_MEMORY;
		ctx_below[ctx_depth++] = current;
	}
	current = dev;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
	CHECK_CTX();
	if (pctx != NULL)
		*pctx = (CUcontext)(uintptr_t)(current + 1);
	current = ctx_depth > 0 ? ctx_below[--ctx_depth] : -1;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	CUresult r = cuDevicePrimaryCtxRetain(pctx, dev);
	return r ? r : cuCtxSetCurrent(*pctx);
}

/* The other versions the real driver exports: the same context (affinity and create params are
 * not modelled). */
EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return cuCtxCreate_v2(pctx, flags, dev);
}

EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int nparams,
			       unsigned int flags, CUdevice dev)
{
	return cuCtxCreate_v2(pctx, flags, dev);
}

EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
			       CUdevice dev)
{
	return cuCtxCreate_v2(pctx, flags, dev);
}

EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
	CHECK_CTX();
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*device = current;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void)
{
	uint64_t until;

	CHECK_CTX();
	pthread_mutex_lock(&mu);
	until = devs[PHYS(current)].busy_until;
	pthread_mutex_unlock(&mu);
	sleep_until(until);
	return CUDA_SUCCESS;
}


/* ---- streams: each belongs to the context current when it was made ---- */
#define MAX_STREAMS 256
#define STREAM_BASE 0x50000ULL
static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static int stream_dev[MAX_STREAMS]; /* CUDA ordinal + 1; 0 = free */

EXPORT CUresult cuStreamCreate(CUstream *ps, unsigned int flags)
{
	CHECK_CTX();
	if (ps == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&streams_mu);
	for (int i = 0; i < MAX_STREAMS; i++) {
		if (stream_dev[i] == 0) {
			stream_dev[i] = current + 1;
			pthread_mutex_unlock(&streams_mu);
			*ps = (CUstream)(uintptr_t)(STREAM_BASE + 16ULL * (uint64_t)i);
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&streams_mu);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

/* The slot of a stream cuStreamCreate made, or -1 (special handles included). */
static int stream_slot(CUstream s)
{
	uint64_t v = (uint64_t)(uintptr_t)s;

	if (v < STREAM_BASE || (v - STREAM_BASE) % 16 || (v - STREAM_BASE) / 16 >= MAX_STREAMS)
		return -1;
	return (int)((v - STREAM_BASE) / 16);
}

EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{
	int i = stream_slot(s);

	CHECK_INIT();
	pthread_mutex_lock(&streams_mu);
	if (i < 0 || stream_dev[i] == 0) {
		pthread_mutex_unlock(&streams_mu);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	stream_dev[i] = 0;
	pthread_mutex_unlock(&streams_mu);
	return CUDA_SUCCESS;
}

/* The CUDA ordinal stream `s` runs on: a special handle (NULL, CU_STREAM_LEGACY,
 * CU_STREAM_PER_THREAD) is the current context's. */
static CUresult stream_device(CUstream s, int *dev)
{
	int i = stream_slot(s);

	CHECK_INIT();
	if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
		CHECK_CTX();
		*dev = current;
		return CUDA_SUCCESS;
	}
	pthread_mutex_lock(&streams_mu);
	*dev = i < 0 ? -1 : stream_dev[i] - 1;
	pthread_mutex_unlock(&streams_mu);
	return *dev < 0 ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

/* Waits for the stream's device (the fake keeps one queue per device), context current or not. */
EXPORT CUresult cuStreamSynchronize(CUstream s)
{
	uint64_t until;
	int dev;
	CUresult r;

	if ((r = stream_device(s, &dev)) != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&mu);
	until = devs[PHYS(dev)].busy_until;
	pthread_mutex_unlock(&mu);
	sleep_until(until);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamGetCtx(CUstream s, CUcontext *pctx)
{
	int dev;
	CUresult r;

	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if ((r = stream_device(s, &dev)) != CUDA_SUCCESS)
		return r;
	*pctx = (CUcontext)(uintptr_t)(dev + 1);
	return CUDA_SUCCESS;
}

#ifndef FAKE_OLD_DRIVER
EXPORT CUresult cuStreamGetCtx_v2(CUstream s, CUcontext *pctx, CUgreenCtx *pgreen)
{
	if (pgreen == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pgreen = NULL; /* no green contexts here */
	return cuStreamGetCtx(s, pctx);
}
#endif

/* ---- memory ---- */
/* What an allocation occupies on the device, as the real driver lays it out: whole pages of the
 * allocation granularity at or above it, 512-byte steps of a shared page below it. */
static uint64_t occupied(uint64_t size)
{
	uint64_t step = size >= cfg.granularity ? cfg.granularity : 512;

	return (size + step - 1) / step * step;
}

static CUresult mem_add(int dev, uint64_t size, int kind, uint64_t *addr)
{
	void *p;
	int on_device = !(KIND(kind) & HOST_KINDS);

	pthread_mutex_lock(&mu);
	if (on_device && devs[dev].used + occupied(size) > cfg.memory) {
		pthread_mutex_unlock(&mu);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	static uint64_t next_fast = 0x7e0000000000ULL;
	if (cfg.fast_alloc) { /* benchmarks: addresses only, no memory behind them */
		p = (void *)(uintptr_t)next_fast;
		next_fast += (size + 0xfffffULL) & ~0xfffffULL;
	} else {
		p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	}
	if (p == MAP_FAILED) {
		pthread_mutex_unlock(&mu);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	struct mem *m = calloc(1, sizeof(*m));
	m->addr = (uint64_t)(uintptr_t)p;
	m->size = size;
	m->dev = dev;
	m->kind = kind;
	m->next = mems;
	mems = m;
	if (on_device)
		devs[dev].used += occupied(size);
	pthread_mutex_unlock(&mu);
	*addr = m->addr;
	return CUDA_SUCCESS;
}

/* Frees the allocation at `addr` if its kind is one of `kinds` (a KIND() mask). */
static CUresult mem_del(uint64_t addr, int kinds)
{
	pthread_mutex_lock(&mu);
	for (struct mem **pp = &mems; *pp; pp = &(*pp)->next) {
		struct mem *m = *pp;
		if (m->addr != addr || !(KIND(m->kind) & kinds))
			continue;
		*pp = m->next;
		if (!(KIND(m->kind) & HOST_KINDS))
			devs[m->dev].used -= occupied(m->size);
		pthread_mutex_unlock(&mu);
		if (!cfg.fast_alloc)
			munmap((void *)(uintptr_t)m->addr, m->size ? m->size : 1);
		free(m);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&mu);
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult alloc_kind(CUdeviceptr *dptr, size_t bytesize, int kind)
{
	uint64_t a;
	CUresult r;

	CHECK_CTX();
	if (dptr == NULL || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if ((r = mem_add(PHYS(current), bytesize, kind, &a)) == CUDA_SUCCESS)
		*dptr = a;
	return r;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	return alloc_kind(dptr, bytesize, 1);
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	return alloc_kind(dptr, bytesize, 2);
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t w, size_t h,
				   unsigned int elem)
{
	if (pPitch == NULL || (elem != 4 && elem != 8 && elem != 16))
		return CUDA_ERROR_INVALID_VALUE;
	*pPitch = (w + 511) & ~(size_t)511;
	return alloc_kind(dptr, *pPitch * h, 1);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	CHECK_INIT();
	if (dptr == 0)
		return CUDA_SUCCESS;
	return mem_del(dptr, KIND(1) | KIND(2) | KIND(6) | KIND(7));
}

#ifndef FAKE_OLD_DRIVER
/* ---- memory pools: a device's default pool, or one cuMemPoolCreate made at a location ---- */
#define MAX_POOLS 64 /* the first FAKE_MAX_DEVICES are the devices' default pools */
#define POOL_BASE 0x60000ULL
static struct {
	int live, host, dev; /* dev: CUDA ordinal of a device pool */
} pools[MAX_POOLS];
static int current_pool[FAKE_MAX_DEVICES]; /* slot + 1; 0 = the default pool */

static CUmemoryPool pool_handle(int slot)
{
	return (CUmemoryPool)(uintptr_t)(POOL_BASE + 16ULL * (uint64_t)slot);
}

/* The live pool `p` names, its slot; -1 if none (default pools live from cuInit). */
static int pool_slot(CUmemoryPool p)
{
	uint64_t v = (uint64_t)(uintptr_t)p, i;

	if (v < POOL_BASE || (v - POOL_BASE) % 16 || (i = (v - POOL_BASE) / 16) >= MAX_POOLS)
		return -1;
	if (i < FAKE_MAX_DEVICES)
		return (int)i < cfg.ndev ? (int)i : -1;
	return pools[i].live ? (int)i : -1;
}

EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
	CHECK_INIT();
	if (pool == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= cfg.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	*pool = pool_handle(dev);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	CHECK_INIT();
	if (pool == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= cfg.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&streams_mu);
	*pool = pool_handle(current_pool[dev] ? current_pool[dev] - 1 : dev);
	pthread_mutex_unlock(&streams_mu);
	return CUDA_SUCCESS;
}

/* The pool must be local to the device, as the real driver requires. */
EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	int i;

	CHECK_INIT();
	if (dev < 0 || dev >= cfg.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&streams_mu);
	i = pool_slot(pool);
	if (i < 0 || (i >= FAKE_MAX_DEVICES && (pools[i].host || pools[i].dev != dev)) ||
	    (i < FAKE_MAX_DEVICES && i != dev)) {
		pthread_mutex_unlock(&streams_mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	current_pool[dev] = i + 1;
	pthread_mutex_unlock(&streams_mu);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
	int host, dev;

	CHECK_INIT();
	if (pool == NULL || props == NULL || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	host = props->location.type == CU_MEM_LOCATION_TYPE_HOST ||
	       props->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
	dev = props->location.id;
	if (!host && (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || dev < 0 ||
		      dev >= cfg.ndev))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&streams_mu);
	for (int i = FAKE_MAX_DEVICES; i < MAX_POOLS; i++) {
		if (!pools[i].live) {
			pools[i].live = 1;
			pools[i].host = host;
			pools[i].dev = host ? -1 : dev;
			pthread_mutex_unlock(&streams_mu);
			*pool = pool_handle(i);
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&streams_mu);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

/* A default pool cannot be destroyed; a device's current pool that is, leaves it the default. */
EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	int i;

	CHECK_INIT();
	pthread_mutex_lock(&streams_mu);
	i = pool_slot(pool);
	if (i < FAKE_MAX_DEVICES) {
		pthread_mutex_unlock(&streams_mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	pools[i].live = 0;
	for (int d = 0; d < FAKE_MAX_DEVICES; d++)
		if (current_pool[d] == i + 1)
			current_pool[d] = 0;
	pthread_mutex_unlock(&streams_mu);
	return CUDA_SUCCESS;
}

/* Stream capture: a stream cuStreamCreate made may capture into a graph; stream-ordered
 * allocations and frees on it then become the graph's memory nodes (no memory until then). */
struct fake_graph;
static struct fake_graph *stream_capture[MAX_STREAMS];
static CUresult graph_alloc_node(struct fake_graph *g, CUDA_MEM_ALLOC_NODE_PARAMS *p);
static CUresult graph_free_node(struct fake_graph *g, CUdeviceptr dptr);

static struct fake_graph *capturing(CUstream s)
{
	struct fake_graph *g;
	int i = stream_slot(s);

	if (i < 0)
		return NULL;
	pthread_mutex_lock(&streams_mu);
	g = stream_capture[i];
	pthread_mutex_unlock(&streams_mu);
	return g;
}

static CUresult captured_alloc(struct fake_graph *g, CUdeviceptr *dptr, size_t bytesize, int dev)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	CUresult r;

	memset(&p, 0, sizeof(p));
	p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.poolProps.location.id = dev;
	p.bytesize = bytesize;
	if ((r = graph_alloc_node(g, &p)) == CUDA_SUCCESS)
		*dptr = p.dptr;
	return r;
}

/* `bytesize` from `pool` (its location decides where the memory is), ordered on `s`. */
static CUresult pool_alloc(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{
	struct fake_graph *g = capturing(s);

	int i, dev, host;
	uint64_t a;
	CUresult r;

	if ((r = stream_device(s, &dev)) != CUDA_SUCCESS)
		return r;
	if (dptr == NULL || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&streams_mu);
	i = pool_slot(pool);
	host = i >= FAKE_MAX_DEVICES && pools[i].host;
	dev = i < 0 ? -1 : i < FAKE_MAX_DEVICES ? i : pools[i].dev;
	pthread_mutex_unlock(&streams_mu);
	if (i < 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (g != NULL && !host)
		return captured_alloc(g, dptr, bytesize, dev);
	if ((r = mem_add(host ? 0 : PHYS(dev), bytesize, host ? 6 : 1, &a)) == CUDA_SUCCESS)
		*dptr = a;
	return r;
}

/* From the current pool of the stream's device (always that device's own memory). */
static CUresult stream_alloc(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
	CUmemoryPool pool;
	int dev;
	CUresult r;

	if ((r = stream_device(s, &dev)) != CUDA_SUCCESS ||
	    (r = cuDeviceGetMemPool(&pool, dev)) != CUDA_SUCCESS)
		return r;
	return pool_alloc(dptr, bytesize, pool, s);
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
	return stream_alloc(dptr, bytesize, s);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
	return stream_alloc(dptr, bytesize, s);
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool p,
					CUstream s)
{
	return pool_alloc(dptr, bytesize, p, s);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool p,
					     CUstream s)
{
	return pool_alloc(dptr, bytesize, p, s);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
	struct fake_graph *g = capturing(s);

	return g != NULL ? graph_free_node(g, dptr) : cuMemFree_v2(dptr);
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
	return cuMemFreeAsync(dptr, s);
}

/* ---- graphs with memory nodes ----
 * An alloc node's address is fixed when the node is made; the fake maps its memory right then
 * (the real driver at instantiation or launch: earlier, never later). A graph with memory nodes
 * has at most one executable graph at a time. Destroying the graph unmaps the memory of its
 * nodes unless it was instantiated without freeing that memory itself: then it stays until
 * cuMemFree/cuMemFreeAsync, as an allocation a launch left behind does. */
#define GRAPH_NODES 64
struct fake_graph {
	struct {
		uint64_t addr;
		int freed_here;
	} alloc[GRAPH_NODES];
	int nalloc, execs, instantiated, destroyed;
};
struct fake_exec {
	struct fake_graph *graph;
};
static pthread_mutex_t graphs_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long graph_trims[FAKE_MAX_DEVICES];

EXPORT CUresult cuGraphCreate(CUgraph *g, unsigned int flags)
{
	CHECK_INIT();
	if (g == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	*g = (CUgraph)calloc(1, sizeof(struct fake_graph));
	return *g ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult graph_alloc_node(struct fake_graph *g, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	uint64_t a;
	CUresult r;

	CHECK_INIT();
	if (g == NULL || p == NULL || p->bytesize == 0 || p->poolProps.handleTypes != 0 ||
	    p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    p->poolProps.location.id < 0 || p->poolProps.location.id >= cfg.ndev)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graphs_mu);
	if (g->nalloc == GRAPH_NODES) {
		pthread_mutex_unlock(&graphs_mu);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	r = mem_add(PHYS(p->poolProps.location.id), p->bytesize, 7, &a);
	if (r == CUDA_SUCCESS) {
		g->alloc[g->nalloc].addr = a;
		g->alloc[g->nalloc++].freed_here = 0;
		p->dptr = a;
	}
	pthread_mutex_unlock(&graphs_mu);
	return r;
}

/* A free node: of an allocation of this graph (freed here), or of another graph's. */
static CUresult graph_free_node(struct fake_graph *g, CUdeviceptr dptr)
{
	CUresult r = CUDA_ERROR_INVALID_VALUE;

	CHECK_INIT();
	if (g == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graphs_mu);
	for (int i = 0; i < g->nalloc; i++)
		if (g->alloc[i].addr == dptr && !g->alloc[i].freed_here) {
			g->alloc[i].freed_here = 1;
			r = CUDA_SUCCESS;
		}
	pthread_mutex_unlock(&graphs_mu);
	if (r != CUDA_SUCCESS) {
		pthread_mutex_lock(&mu);
		for (struct mem *m = mems; m; m = m->next)
			if (m->addr == dptr && m->kind == 7)
				r = CUDA_SUCCESS;
		pthread_mutex_unlock(&mu);
	}
	return r;
}

EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
				       size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	CUresult r = node ? graph_alloc_node((struct fake_graph *)g, p) : CUDA_ERROR_INVALID_VALUE;

	if (r == CUDA_SUCCESS)
		*node = (CUgraphNode)(uintptr_t)p->dptr;
	return r;
}

EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
				      size_t ndeps, CUdeviceptr dptr)
{
	CUresult r = node ? graph_free_node((struct fake_graph *)g, dptr) : CUDA_ERROR_INVALID_VALUE;

	if (r == CUDA_SUCCESS)
		*node = (CUgraphNode)(uintptr_t)(dptr + 1);
	return r;
}

/* cuGraphAddNode knows memory nodes only (what libvgpu looks at); other types are refused. */
EXPORT CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t ndeps,
			       CUgraphNodeParams *p)
{
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
		return cuGraphAddMemAllocNode(node, g, deps, ndeps, &p->alloc);
	if (p->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
		return cuGraphAddMemFreeNode(node, g, deps, ndeps, p->free.dptr);
	return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
				  const CUgraphEdgeData *edges, size_t ndeps, CUgraphNodeParams *p)
{
	return cuGraphAddNode(node, g, deps, ndeps, p);
}

static CUresult instantiate(CUgraphExec *e, CUgraph graph)
{
	struct fake_graph *g = (struct fake_graph *)graph;
	struct fake_exec *x;

	CHECK_INIT();
	if (e == NULL || g == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graphs_mu);
	if (g->nalloc > 0 && g->execs > 0) { /* one instantiation at a time */
		pthread_mutex_unlock(&graphs_mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if ((x = calloc(1, sizeof(*x))) != NULL) {
		x->graph = g;
		g->execs++;
		g->instantiated = 1;
	}
	pthread_mutex_unlock(&graphs_mu);
	*e = (CUgraphExec)x;
	return x ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuGraphInstantiate(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log,
				   size_t size)
{
	return instantiate(e, g);
}
EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log,
				      size_t size)
{
	return instantiate(e, g);
}
EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags)
{
	return instantiate(e, g);
}
EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *e, CUgraph g,
					     CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
	return params ? instantiate(e, g) : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *e, CUgraph g,
						  CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
	return cuGraphInstantiateWithParams(e, g, params);
}

/* The graph lives on (a graph with memory nodes may be instantiated again); an exec's graph
 * struct is freed by cuGraphDestroy only once no exec points to it. */
static void graph_free_if_unused(struct fake_graph *g, int destroyed);

EXPORT CUresult cuGraphExecDestroy(CUgraphExec e)
{
	struct fake_exec *x = (struct fake_exec *)e;

	CHECK_INIT();
	if (x == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&graphs_mu);
	x->graph->execs--;
	pthread_mutex_unlock(&graphs_mu);
	graph_free_if_unused(x->graph, 0);
	free(x);
	return CUDA_SUCCESS;
}

static void graph_free_if_unused(struct fake_graph *g, int destroying)
{
	pthread_mutex_lock(&graphs_mu);
	g->destroyed |= destroying;
	if (!g->destroyed || g->execs > 0) {
		pthread_mutex_unlock(&graphs_mu);
		return;
	}
	for (int i = 0; i < g->nalloc; i++)
		if (g->alloc[i].freed_here || !g->instantiated)
			mem_del(g->alloc[i].addr, KIND(7)); /* already freed outside: no error */
	pthread_mutex_unlock(&graphs_mu);
	free(g);
}

EXPORT CUresult cuGraphDestroy(CUgraph graph)
{
	struct fake_graph *g = (struct fake_graph *)graph;

	CHECK_INIT();
	if (g == NULL || g->destroyed)
		return CUDA_ERROR_INVALID_VALUE;
	graph_free_if_unused(g, 1);
	return CUDA_SUCCESS;
}

/* Capture (CUDA 10.1's form, with a mode; the fake has one mode): into a new graph. */
EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, int mode)
{
	int i = stream_slot(s), ok;
	CUgraph g;
	CUresult r;

	if (i < 0)
		return CUDA_ERROR_INVALID_VALUE;
	if ((r = cuGraphCreate(&g, 0)) != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&streams_mu);
	ok = stream_dev[i] != 0 && stream_capture[i] == NULL;
	if (ok)
		stream_capture[i] = (struct fake_graph *)g;
	pthread_mutex_unlock(&streams_mu);
	if (!ok)
		free(g);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *graph)
{
	int i = stream_slot(s);

	if (i < 0 || graph == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&streams_mu);
	*graph = (CUgraph)stream_capture[i];
	stream_capture[i] = NULL;
	pthread_mutex_unlock(&streams_mu);
	return *graph != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *status,
					  cuuint64_t *id, CUgraph *graph,
					  const CUgraphNode **deps, size_t *ndeps)
{
	struct fake_graph *g = capturing(s);

	CHECK_INIT();
	if (status == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*status = g != NULL ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
	if (id != NULL)
		*id = (cuuint64_t)(uintptr_t)g;
	if (graph != NULL)
		*graph = (CUgraph)g;
	if (deps != NULL)
		*deps = NULL;
	if (ndeps != NULL)
		*ndeps = 0;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
	CHECK_INIT();
	if (dev < 0 || dev >= cfg.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	__atomic_add_fetch(&graph_trims[dev], 1, __ATOMIC_RELAXED);
	return CUDA_SUCCESS;
}

/* For tests: how often cuDeviceGraphMemTrim ran on CUDA ordinal `dev`. */
EXPORT unsigned long fake_cuda_graph_trims(int dev)
{
	return dev >= 0 && dev < FAKE_MAX_DEVICES ? __atomic_load_n(&graph_trims[dev], __ATOMIC_RELAXED)
						  : 0;
}
#endif

EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
					      CUmemAllocationGranularity_flags option)
{
	CHECK_INIT();
	if (g == NULL || prop == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*g = cfg.granularity;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			    const CUmemAllocationProp *prop, unsigned long long flags)
{
	uint64_t a;
	CUresult r;
	int host;

	CHECK_INIT();
	if (handle == NULL || prop == NULL || size == 0 || size % cfg.granularity)
		return CUDA_ERROR_INVALID_VALUE;
	host = prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE;
	if (!host && (prop->location.id < 0 || prop->location.id >= cfg.ndev))
		return CUDA_ERROR_INVALID_DEVICE;
	if ((r = mem_add(host ? 0 : PHYS(prop->location.id), size, host ? 5 : 3, &a)) == CUDA_SUCCESS)
		*handle = a;
	return r;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	CHECK_INIT();
	return mem_del(handle, KIND(3) | KIND(5));
}

static CUresult array_create(CUarray *h, uint64_t bytes)
{
	uint64_t a;
	CUresult r;

	CHECK_CTX();
	if (h == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if ((r = mem_add(PHYS(current), bytes, 4, &a)) == CUDA_SUCCESS)
		*h = (CUarray)(uintptr_t)a;
	return r;
}

static uint64_t fmt_size(CUarray_format f)
{
	return f == CU_AD_FORMAT_FLOAT || f == CU_AD_FORMAT_UNSIGNED_INT32 ||
			       f == CU_AD_FORMAT_SIGNED_INT32
		       ? 4
	       : f == CU_AD_FORMAT_HALF || f == CU_AD_FORMAT_UNSIGNED_INT16 ||
			       f == CU_AD_FORMAT_SIGNED_INT16
		       ? 2
		       : 1;
}

EXPORT CUresult cuArrayCreate_v2(CUarray *h, const CUDA_ARRAY_DESCRIPTOR *d)
{
	if (d == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return array_create(h, d->Width * (d->Height ? d->Height : 1) * fmt_size(d->Format) *
				       d->NumChannels);
}

EXPORT CUresult cuArray3DCreate_v2(CUarray *h, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	if (d == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return array_create(h, d->Width * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1) *
				       fmt_size(d->Format) * d->NumChannels);
}

EXPORT CUresult cuArrayDestroy(CUarray h)
{
	CHECK_INIT();
	return mem_del((uint64_t)(uintptr_t)h, KIND(4));
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total)
{
	CHECK_CTX();
	if (free_ == NULL || total == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	*total = cfg.memory;
	*free_ = cfg.memory - devs[PHYS(current)].used;
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

/* ---- launches: each kernel keeps the device busy for FAKE_CUDA_KERNEL_US ---- */
static CUresult launch(unsigned int kernels)
{
	struct device *d;
	uint64_t now, start, wait_until = 0;

	CHECK_CTX();
	uint32_t pid = fake_host_pid();
	pthread_mutex_lock(&mu);
	d = &devs[PHYS(current)];
	for (unsigned int k = 0; k < kernels; k++) {
		now = fake_now_ns();
		start = d->busy_until > now ? d->busy_until : now;
		d->busy_until = start + cfg.kernel_ns;
		d->busy_total += cfg.kernel_ns;
		d->launches++;
		if (cfg.kernel_ns == 0)
			continue;
		struct busy_seg *last = d->nseg ? &d->seg[(d->head + NSEG - 1) % NSEG] : NULL;
		if (last && last->end == start && last->pid == pid) {
			last->end = d->busy_until;
		} else {
			d->seg[d->head] = (struct busy_seg){start, d->busy_until, pid};
			d->head = (d->head + 1) % NSEG;
			if (d->nseg < NSEG)
				d->nseg++;
		}
	}
	/* A full launch queue blocks the launching thread, as on a real device. */
	if (cfg.kernel_ns && d->busy_until > fake_now_ns() + (uint64_t)cfg.queue * cfg.kernel_ns)
		wait_until = d->busy_until - (uint64_t)cfg.queue * cfg.kernel_ns;
	pthread_mutex_unlock(&mu);
	sleep_until(wait_until);
	return CUDA_SUCCESS;
}

#define LAUNCH_PARAMS                                                                              \
	(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,         \
	 unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params, void **extra)
#define COOP_PARAMS                                                                                \
	(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,         \
	 unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params)

static CUresult check_dims(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			   unsigned int bx, unsigned int by, unsigned int bz)
{
	if (f == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!gx || !gy || !gz || !bx || !by || !bz || (uint64_t)bx * by * bz > 1024)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel LAUNCH_PARAMS
{
	CUresult r = check_dims(f, gx, gy, gz, bx, by, bz);
	return r ? r : launch(1);
}
EXPORT CUresult cuLaunchKernel_ptsz LAUNCH_PARAMS
{
	CUresult r = check_dims(f, gx, gy, gz, bx, by, bz);
	return r ? r : launch(1);
}
EXPORT CUresult cuLaunchCooperativeKernel COOP_PARAMS
{
	CUresult r = check_dims(f, gx, gy, gz, bx, by, bz);
	return r ? r : launch(1);
}
EXPORT CUresult cuLaunchCooperativeKernel_ptsz COOP_PARAMS
{
	CUresult r = check_dims(f, gx, gy, gz, bx, by, bz);
	return r ? r : launch(1);
}
#ifndef FAKE_OLD_DRIVER
EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **p, void **e)
{
	if (c == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = check_dims(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
				c->blockDimZ);
	return r ? r : launch(1);
}
EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **p, void **e)
{
	return cuLaunchKernelEx(c, f, p, e);
}
#endif
EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s)
{
	return g == NULL ? CUDA_ERROR_INVALID_VALUE : launch((unsigned int)cfg.graph_kernels);
}
EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s)
{
	return cuGraphLaunch(g, s);
}

/* ---- modules: any image loads, any name is a kernel (launches use FAKE_CUDA_KERNEL_US) ---- */
typedef struct CUmod_st *CUmodule;
EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	CHECK_CTX();
	if (module == NULL || image == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*module = (CUmodule)(uintptr_t)0x3000;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule module, const char *name)
{
	CHECK_CTX();
	if (f == NULL || module == NULL || name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*f = (CUfunction)(uintptr_t)0x4000;
	return CUDA_SUCCESS;
}

/* ---- helpers for the fake NVML and tests ---- */
EXPORT uint64_t fake_cuda_memory_used(int dev)
{
	uint64_t u;
	config();
	pthread_mutex_lock(&mu);
	u = dev >= 0 && dev < FAKE_MAX_DEVICES ? devs[dev].used : 0;
	pthread_mutex_unlock(&mu);
	return u;
}

EXPORT uint64_t fake_cuda_memory_total(void)
{
	config();
	return cfg.memory;
}

EXPORT int fake_cuda_device_count(void)
{
	config();
	return cfg.nphys;
}

/* Busy time of device `dev` in the last `window` ns, of process `pid` (0 = all). */
EXPORT uint64_t fake_cuda_busy_ns_pid(int dev, uint64_t window, uint32_t pid)
{
	uint64_t now = fake_now_ns(), from = now > window ? now - window : 0, busy = 0;
	struct device *d;

	config();
	if (dev < 0 || dev >= FAKE_MAX_DEVICES)
		return 0;
	pthread_mutex_lock(&mu);
	d = &devs[dev];
	for (unsigned int i = 0; i < d->nseg; i++) {
		struct busy_seg *s = &d->seg[(d->head + NSEG - 1 - i) % NSEG];
		uint64_t a = s->start > from ? s->start : from, b = s->end < now ? s->end : now;
		if (b > a && (pid == 0 || s->pid == pid))
			busy += b - a;
		if (s->end < from)
			break;
	}
	pthread_mutex_unlock(&mu);
	return busy;
}

EXPORT uint64_t fake_cuda_busy_ns(int dev, uint64_t window)
{
	return fake_cuda_busy_ns_pid(dev, window, 0);
}

/* Distinct pids that kept device `dev` busy in the last `window` ns; returns the count. */
EXPORT int fake_cuda_active_pids(int dev, uint64_t window, uint32_t *out, int max)
{
	uint64_t now = fake_now_ns(), from = now > window ? now - window : 0;
	int n = 0;

	config();
	if (dev < 0 || dev >= FAKE_MAX_DEVICES)
		return 0;
	pthread_mutex_lock(&mu);
	struct device *d = &devs[dev];
	for (unsigned int i = 0; i < d->nseg; i++) {
		struct busy_seg *s = &d->seg[(d->head + NSEG - 1 - i) % NSEG];
		if (s->end < from)
			break;
		int seen = 0;
		for (int k = 0; k < n; k++)
			seen |= out[k] == s->pid;
		if (!seen && n < max)
			out[n++] = s->pid;
	}
	pthread_mutex_unlock(&mu);
	return n;
}

EXPORT uint64_t fake_cuda_busy_total_ns(int dev)
{
	uint64_t b, now = fake_now_ns();
	config();
	pthread_mutex_lock(&mu);
	/* only the part that has already run */
	b = devs[dev].busy_total - (devs[dev].busy_until > now ? devs[dev].busy_until - now : 0);
	pthread_mutex_unlock(&mu);
	return b;
}

EXPORT uint64_t fake_cuda_launches(int dev)
{
	uint64_t n;
	config();
	pthread_mutex_lock(&mu);
	n = devs[dev].launches;
	pthread_mutex_unlock(&mu);
	return n;
}

/* ---- cuGetProcAddress: versioned, stream-flavoured, like the real driver ---- */
/* Internal entry points, handed out instead of the exports when FAKE_CUDA_PROC_INTERNAL=1. */
static CUresult internal_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	return alloc_kind(dptr, bytesize, 1);
}
static CUresult internal_cuLaunchKernel LAUNCH_PARAMS
{
	CUresult r = check_dims(f, gx, gy, gz, bx, by, bz);
	return r ? r : launch(1);
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
				 cuuint64_t flags);
#ifndef FAKE_OLD_DRIVER
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
				    cuuint64_t flags, CUdriverProcAddressQueryResult *status);
#endif

struct proc {
	const char *base;
	int since, ptds;
	void *fn, *internal;
};

static const struct proc procs[] = {
	{"cuInit", 2000, 0, (void *)cuInit, NULL},
	{"cuDriverGetVersion", 2020, 0, (void *)cuDriverGetVersion, NULL},
	{"cuGetProcAddress", 11030, 0, (void *)cuGetProcAddress, NULL},
#ifndef FAKE_OLD_DRIVER
	{"cuGetProcAddress", 12000, 0, (void *)cuGetProcAddress_v2, NULL},
#endif
	{"cuDeviceGet", 2000, 0, (void *)cuDeviceGet, NULL},
	{"cuDeviceGetCount", 2000, 0, (void *)cuDeviceGetCount, NULL},
	{"cuDeviceGetAttribute", 2000, 0, (void *)cuDeviceGetAttribute, NULL},
	{"cuDeviceGetUuid", 9020, 0, (void *)cuDeviceGetUuid, NULL},
	{"cuDeviceTotalMem", 3020, 0, (void *)cuDeviceTotalMem_v2, NULL},
	{"cuDevicePrimaryCtxRetain", 7000, 0, (void *)cuDevicePrimaryCtxRetain, NULL},
	{"cuCtxCreate", 2000, 0, (void *)cuCtxCreate, NULL},
	{"cuCtxCreate", 3020, 0, (void *)cuCtxCreate_v2, NULL},
	{"cuCtxCreate", 11040, 0, (void *)cuCtxCreate_v3, NULL},
	{"cuCtxCreate", 12050, 0, (void *)cuCtxCreate_v4, NULL},
	{"cuCtxSetCurrent", 4000, 0, (void *)cuCtxSetCurrent, NULL},
	{"cuCtxGetDevice", 2000, 0, (void *)cuCtxGetDevice, NULL},
	{"cuCtxSynchronize", 2000, 0, (void *)cuCtxSynchronize, NULL},
	{"cuCtxGetCurrent", 4000, 0, (void *)cuCtxGetCurrent, NULL},
	{"cuCtxPushCurrent", 4000, 0, (void *)cuCtxPushCurrent_v2, NULL},
	{"cuCtxPopCurrent", 4000, 0, (void *)cuCtxPopCurrent_v2, NULL},
	{"cuStreamCreate", 2000, 0, (void *)cuStreamCreate, NULL},
	{"cuStreamDestroy", 4000, 0, (void *)cuStreamDestroy_v2, NULL},
	{"cuStreamGetCtx", 9020, 0, (void *)cuStreamGetCtx, NULL},
	{"cuMemAlloc", 3020, 0, (void *)cuMemAlloc_v2, (void *)internal_cuMemAlloc_v2},
	{"cuMemAllocManaged", 6000, 0, (void *)cuMemAllocManaged, NULL},
	{"cuMemAllocPitch", 3020, 0, (void *)cuMemAllocPitch_v2, NULL},
	{"cuMemFree", 3020, 0, (void *)cuMemFree_v2, NULL},
	{"cuMemGetInfo", 3020, 0, (void *)cuMemGetInfo_v2, NULL},
	{"cuMemCreate", 10020, 0, (void *)cuMemCreate, NULL},
	{"cuMemRelease", 10020, 0, (void *)cuMemRelease, NULL},
	{"cuMemGetAllocationGranularity", 10020, 0, (void *)cuMemGetAllocationGranularity, NULL},
#ifndef FAKE_OLD_DRIVER
	{"cuMemAllocAsync", 11020, 0, (void *)cuMemAllocAsync, NULL},
	{"cuMemAllocAsync", 11020, 1, (void *)cuMemAllocAsync_ptsz, NULL},
	{"cuMemAllocFromPoolAsync", 11020, 0, (void *)cuMemAllocFromPoolAsync, NULL},
	{"cuMemAllocFromPoolAsync", 11020, 1, (void *)cuMemAllocFromPoolAsync_ptsz, NULL},
	{"cuMemFreeAsync", 11020, 0, (void *)cuMemFreeAsync, NULL},
	{"cuMemFreeAsync", 11020, 1, (void *)cuMemFreeAsync_ptsz, NULL},
	{"cuMemPoolCreate", 11020, 0, (void *)cuMemPoolCreate, NULL},
	{"cuMemPoolDestroy", 11020, 0, (void *)cuMemPoolDestroy, NULL},
	{"cuDeviceGetDefaultMemPool", 11020, 0, (void *)cuDeviceGetDefaultMemPool, NULL},
	{"cuDeviceGetMemPool", 11020, 0, (void *)cuDeviceGetMemPool, NULL},
	{"cuDeviceSetMemPool", 11020, 0, (void *)cuDeviceSetMemPool, NULL},
	{"cuStreamGetCtx", 12050, 0, (void *)cuStreamGetCtx_v2, NULL},
	{"cuGraphCreate", 10000, 0, (void *)cuGraphCreate, NULL},
	{"cuGraphAddMemAllocNode", 11040, 0, (void *)cuGraphAddMemAllocNode, NULL},
	{"cuGraphAddMemFreeNode", 11040, 0, (void *)cuGraphAddMemFreeNode, NULL},
	{"cuGraphAddNode", 12020, 0, (void *)cuGraphAddNode, NULL},
	{"cuGraphAddNode", 12030, 0, (void *)cuGraphAddNode_v2, NULL},
	{"cuGraphInstantiate", 10000, 0, (void *)cuGraphInstantiate, NULL},
	{"cuGraphInstantiate", 11000, 0, (void *)cuGraphInstantiate_v2, NULL},
	{"cuGraphInstantiate", 12000, 0, (void *)cuGraphInstantiateWithFlags, NULL},
	{"cuGraphInstantiateWithFlags", 11040, 0, (void *)cuGraphInstantiateWithFlags, NULL},
	{"cuGraphInstantiateWithParams", 12000, 0, (void *)cuGraphInstantiateWithParams, NULL},
	{"cuGraphInstantiateWithParams", 12000, 1, (void *)cuGraphInstantiateWithParams_ptsz, NULL},
	{"cuGraphExecDestroy", 10000, 0, (void *)cuGraphExecDestroy, NULL},
	{"cuGraphDestroy", 10000, 0, (void *)cuGraphDestroy, NULL},
	{"cuDeviceGraphMemTrim", 11040, 0, (void *)cuDeviceGraphMemTrim, NULL},
	{"cuStreamBeginCapture", 10010, 0, (void *)cuStreamBeginCapture_v2, NULL},
	{"cuStreamEndCapture", 10000, 0, (void *)cuStreamEndCapture, NULL},
	{"cuStreamGetCaptureInfo", 11030, 0, (void *)cuStreamGetCaptureInfo_v2, NULL},
	{"cuLaunchKernelEx", 11060, 0, (void *)cuLaunchKernelEx, NULL},
	{"cuLaunchKernelEx", 11060, 1, (void *)cuLaunchKernelEx_ptsz, NULL},
#endif
	{"cuArrayCreate", 3020, 0, (void *)cuArrayCreate_v2, NULL},
	{"cuArray3DCreate", 3020, 0, (void *)cuArray3DCreate_v2, NULL},
	{"cuArrayDestroy", 2000, 0, (void *)cuArrayDestroy, NULL},
	{"cuLaunchKernel", 4000, 0, (void *)cuLaunchKernel, (void *)internal_cuLaunchKernel},
	{"cuLaunchKernel", 7000, 1, (void *)cuLaunchKernel_ptsz, NULL},
	{"cuLaunchCooperativeKernel", 9000, 0, (void *)cuLaunchCooperativeKernel, NULL},
	{"cuLaunchCooperativeKernel", 9000, 1, (void *)cuLaunchCooperativeKernel_ptsz, NULL},
	{"cuGraphLaunch", 10000, 0, (void *)cuGraphLaunch, NULL},
	{"cuGraphLaunch", 10000, 1, (void *)cuGraphLaunch_ptsz, NULL},
};

static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
		       CUdriverProcAddressQueryResult *status)
{
	const struct proc *best = NULL;
	int want_ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0, known = 0;

	config();
	if (symbol == NULL || pfn == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
		const struct proc *p = &procs[i];
		if (strcmp(p->base, symbol) != 0)
			continue;
		known = 1;
		if (p->since > version || (p->ptds && !want_ptds))
			continue;
		if (best == NULL || p->ptds > best->ptds ||
		    (p->ptds == best->ptds && p->since > best->since))
			best = p;
	}
	if (status)
		*status = best ? CU_GET_PROC_ADDRESS_SUCCESS
			  : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
				  : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	if (best == NULL)
		return CUDA_ERROR_NOT_FOUND;
	*pfn = cfg.proc_internal && best->internal ? best->internal : best->fn;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	return lookup(symbol, pfn, cudaVersion, flags, NULL);
}

#ifndef FAKE_OLD_DRIVER
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
				    cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
	return lookup(symbol, pfn, cudaVersion, flags, status);
}
#endif
