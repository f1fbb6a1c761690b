/*
 * Memory shares: every allocation is reserved in the shared region (under its lock) before the
 * driver is called, rolled back if the driver fails, and released when freed. Queries report
 * total = limit and free = limit - container usage.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "region.h"
#include "vgpu.h"

#define SMALL_ALIGN 512ULL              /* sub-allocations below the granularity */
#define DEFAULT_GRANULARITY (2ULL << 20) /* when the driver cannot tell */

/* KIND_POOL entries are not charges: a memory pool's home, its CUDA ordinal in `didx` (or
 * POOL_HOST), so that allocations from it are charged where the pool keeps its memory. */
enum alloc_kind { KIND_PTR = 1, KIND_HANDLE = 2, KIND_ARRAY = 3, KIND_POOL = 4 };

/* ---- what we charged, by pointer/handle: open addressing, linear probing ---- */
struct entry {
	uint64_t key; /* 0 = empty */
	uint8_t kind; /* 0 with key != 0: deleted */
	int8_t didx;
	uint64_t bytes;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *table;
static size_t table_cap, table_used; /* used counts live + deleted */

/* The parent's allocations are the parent's charges, not a forked child's. */
static void forget_parent_charges(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	table_lock = fresh;
	free(table);
	table = NULL;
	table_cap = table_used = 0;
}

static void register_fork_handler(void)
{
	pthread_atfork(NULL, NULL, forget_parent_charges);
}

/* Every use of the table comes through here, so the fork handler is in place before the table
 * holds anything (or its lock is held) that a child would inherit. */
static void lock_table(void)
{
	static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

	pthread_once(&fork_once, register_fork_handler);
	pthread_mutex_lock(&table_lock);
}

static size_t slot_of(uint64_t key, uint8_t kind, size_t cap)
{
	uint64_t h = (key ^ ((uint64_t)kind << 61)) * 0x9e3779b97f4a7c15ULL;
	return (size_t)(h >> 17) & (cap - 1);
}

/* Rehashes the live entries into `cap` slots, dropping tombstones. */
static int table_rehash(size_t cap)
{
	struct entry *t = calloc(cap, sizeof(*t));
	size_t live = 0;

	if (t == NULL)
		return -1;
	for (size_t i = 0; i < table_cap; i++) {
		struct entry *e = &table[i];
		if (e->key == 0 || e->kind == 0)
			continue;
		size_t j = slot_of(e->key, e->kind, cap);
		while (t[j].key != 0)
			j = (j + 1) & (cap - 1);
		t[j] = *e;
		live++;
	}
	free(table);
	table = t;
	table_cap = cap;
	table_used = live;
	return 0;
}

static size_t table_live(void)
{
	size_t live = 0;

	for (size_t i = 0; i < table_cap; i++)
		live += table[i].key != 0 && table[i].kind != 0;
	return live;
}

static int table_put(uint64_t key, uint8_t kind, int didx, uint64_t bytes)
{
	size_t i, tomb = SIZE_MAX, cap;
	int rc = 0;

	lock_table();
	if ((table_used + 1) * 2 > table_cap) {
		/* mostly tombstones: clean up at the same size; mostly live: double */
		cap = table_cap == 0 ? 1024 : table_live() * 4 < table_cap ? table_cap : table_cap * 2;
		if (table_rehash(cap) < 0) {
			rc = -1;
			goto out;
		}
	}
	i = slot_of(key, kind, table_cap);
	for (; table[i].key != 0; i = (i + 1) & (table_cap - 1)) {
		if (table[i].kind == 0) {
			if (tomb == SIZE_MAX)
				tomb = i;
		} else if (table[i].key == key && table[i].kind == kind) {
			break;
		}
	}
	if (table[i].key == 0) {
		if (tomb != SIZE_MAX)
			i = tomb; /* reuse the first tombstone on the chain */
		else
			table_used++;
	}
	table[i] = (struct entry){key, kind, (int8_t)didx, bytes};
out:
	pthread_mutex_unlock(&table_lock);
	return rc;
}

/* Removes the entry; returns 0 and its charge, or -1 if we never charged it. */
static int table_take(uint64_t key, uint8_t kind, int *didx, uint64_t *bytes)
{
	int rc = -1;
	size_t i;

	lock_table();
	if (table_cap == 0)
		goto out;
	i = slot_of(key, kind, table_cap);
	for (; table[i].key != 0; i = (i + 1) & (table_cap - 1)) {
		if (table[i].key == key && table[i].kind == kind) {
			*didx = table[i].didx;
			*bytes = table[i].bytes;
			table[i].kind = 0; /* tombstone: keeps probe chains intact */
			rc = 0;
			break;
		}
	}
out:
	pthread_mutex_unlock(&table_lock);
	return rc;
}

/* The entry's device index, left in place; 0, or -1 if there is none. */
static int table_get(uint64_t key, uint8_t kind, int *didx)
{
	int rc = -1;
	size_t i;

	lock_table();
	if (table_cap == 0)
		goto out;
	i = slot_of(key, kind, table_cap);
	for (; table[i].key != 0; i = (i + 1) & (table_cap - 1)) {
		if (table[i].key == key && table[i].kind == kind) {
			*didx = table[i].didx;
			rc = 0;
			break;
		}
	}
out:
	pthread_mutex_unlock(&table_lock);
	return rc;
}

/* ---- sizes ---- */
static uint64_t granularity(CUdevice dev)
{
	static uint64_t cache[VGPU_MAX_DEVICES];
	CUmemAllocationProp prop;
	size_t g = 0;

	if (dev < 0 || dev >= VGPU_MAX_DEVICES)
		return DEFAULT_GRANULARITY;
	if (__atomic_load_n(&cache[dev], __ATOMIC_RELAXED))
		return cache[dev];
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	if (real_cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
		    CUDA_SUCCESS ||
	    g == 0 || (g & (g - 1)) != 0)
		g = DEFAULT_GRANULARITY;
	__atomic_store_n(&cache[dev], (uint64_t)g, __ATOMIC_RELAXED);
	return g;
}

static uint64_t round_up(uint64_t n, uint64_t align)
{
	return n > UINT64_MAX - (align - 1) ? UINT64_MAX & ~(align - 1) : (n + align - 1) & ~(align - 1);
}

/* What an allocation of `bytes` costs on the device: whole pages of the allocation granularity,
 * small allocations share pages and cost their 512-byte aligned size. */
static uint64_t charge_size(CUdevice dev, uint64_t bytes)
{
	uint64_t g = granularity(dev);

	return bytes >= g ? round_up(bytes, g) : round_up(bytes ? bytes : 1, SMALL_ALIGN);
}

/* ---- reserve → call → commit or roll back ---- */
struct charge {
	int didx; /* -1: nothing charged */
	uint64_t bytes;
};

static CUresult charge_begin(struct charge *c, CUdevice dev, uint64_t bytes)
{
	uint64_t limit = vgpu_mem_limit(dev);

	c->didx = -1;
	c->bytes = 0;
	if (dev < 0)
		return CUDA_SUCCESS; /* no context (the driver reports the error), or host memory */
	if (vgpu_dev_denied(dev))
		return CUDA_ERROR_INVALID_DEVICE; /* not the claim's device: no memory at all */
	c->didx = vgpu_dev_index(dev);
	if (c->didx < 0)
		return limit ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
	c->bytes = charge_size(dev, bytes);
	if (vgpu_region_reserve(c->didx, c->bytes, limit) < 0) {
		LOG_INFO("device %d: %llu bytes refused, %llu of %llu in use", (int)dev,
			 (unsigned long long)c->bytes,
			 (unsigned long long)vgpu_region_used(c->didx), (unsigned long long)limit);
		c->didx = -1;
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

static CUresult charge_end(struct charge *c, CUresult r, uint8_t kind, uint64_t key)
{
	if (c->didx < 0)
		return r;
	if (r != CUDA_SUCCESS || key == 0 || table_put(key, kind, c->didx, c->bytes) < 0)
		vgpu_region_release(c->didx, c->bytes);
	return r;
}

/* Frees go: take our record → driver frees → release the charge (or put the record back if
 * the driver refused). Taking the record first matters: once the driver has freed an address,
 * another thread may be handed the same address and record its own charge under it. */
struct freeing {
	int had;
	int didx;
	uint64_t bytes;
	uint8_t kind;
	uint64_t key;
};

static void free_begin(struct freeing *f, uint8_t kind, uint64_t key)
{
	f->kind = kind;
	f->key = key;
	f->had = key != 0 && table_take(key, kind, &f->didx, &f->bytes) == 0;
}

static CUresult free_end(struct freeing *f, CUresult r)
{
	if (!f->had)
		return r; /* not ours (imported, from before us): the driver's business */
	if (r == CUDA_SUCCESS)
		vgpu_region_release(f->didx, f->bytes);
	else if (table_put(f->key, f->kind, f->didx, f->bytes) < 0)
		vgpu_region_release(f->didx, f->bytes);
	return r;
}

/* ---- allocation hooks ---- */
#define CHARGED_PTR_ALLOC(dev, bytes, call)                                                        \
	do {                                                                                       \
		struct charge c;                                                                   \
		CUresult r;                                                                        \
		VGPU_ENTER();                                                                           \
		if (dptr == NULL)                                                                  \
			return call;                                                               \
		if ((r = charge_begin(&c, (dev), (bytes))) != CUDA_SUCCESS)                        \
			return r;                                                                  \
		r = call;                                                                          \
		return charge_end(&c, r, KIND_PTR, r == CUDA_SUCCESS ? *dptr : 0);                 \
	} while (0)

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	CHARGED_PTR_ALLOC(vgpu_current_device(), bytesize, real_cuMemAlloc_v2(dptr, bytesize));
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	/* Managed memory may live on the device: charged in full. */
	CHARGED_PTR_ALLOC(vgpu_current_device(), bytesize,
			  real_cuMemAllocManaged(dptr, bytesize, flags));
}

/* ---- stream-ordered allocations: charged where the memory is ---- */
#define POOL_HOST (-2) /* a pool of pinned host memory: nothing to charge */

/* Where a new pool keeps its memory: a device's ordinal, POOL_HOST, or -1 when the properties
 * do not say (managed pools without a device: charged like cuMemAllocManaged, to the stream's). */
static int pool_home(const CUmemPoolProps *props)
{
	switch (props->location.type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		return props->location.id;
	case CU_MEM_LOCATION_TYPE_HOST:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
		return props->allocType == CU_MEM_ALLOCATION_TYPE_PINNED ? POOL_HOST : -1;
	default:
		return -1;
	}
}

/* The ordinal whose default pool `pool` is (those are made by the driver, never by
 * cuMemPoolCreate), or -1. */
static int default_pool_device(CUmemoryPool pool)
{
	CUmemoryPool p;
	int count = 0;

	if (real_cuDeviceGetCount(&count) != CUDA_SUCCESS)
		return -1;
	for (int d = 0; d < count && d < VGPU_MAX_DEVICES; d++)
		if (real_cuDeviceGetDefaultMemPool(&p, d) == CUDA_SUCCESS && p == pool)
			return d;
	return -1;
}

/* The device an allocation from `pool` lands on (cuMemAllocFromPoolAsync may name a pool of
 * another device than the stream's), POOL_HOST for host memory; a pool we never saw made, the
 * stream's device (over-charging beats not charging). */
static int pool_device(CUmemoryPool pool, CUstream stream)
{
	uint64_t key = (uint64_t)(uintptr_t)pool;
	int dev;

	if (key != 0 && table_get(key, KIND_POOL, &dev) == 0)
		return dev;
	if (key != 0 && (dev = default_pool_device(pool)) >= 0) {
		table_put(key, KIND_POOL, dev, 0);
		return dev;
	}
	return vgpu_stream_device(stream);
}

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	CUresult r;
	int home;

	VGPU_ENTER();
	r = real_cuMemPoolCreate(pool, poolProps);
	if (r == CUDA_SUCCESS && pool != NULL && *pool != NULL && poolProps != NULL &&
	    (home = pool_home(poolProps)) != -1)
		table_put((uint64_t)(uintptr_t)*pool, KIND_POOL, home, 0);
	return r;
}

/* The record goes first, as with frees: once destroyed, the handle may name a new pool. */
CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	uint64_t key = (uint64_t)(uintptr_t)pool, unused;
	int home, had;
	CUresult r;

	vgpu_init();
	had = key != 0 && table_take(key, KIND_POOL, &home, &unused) == 0;
	r = real_cuMemPoolDestroy(pool);
	if (r != CUDA_SUCCESS && had)
		table_put(key, KIND_POOL, home, 0);
	return r;
}

/* cuMemAllocAsync takes from the current pool of the stream's device, which is always that
 * device's own memory. */
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	CHARGED_PTR_ALLOC(vgpu_stream_device(hStream), bytesize,
			  real_cuMemAllocAsync(dptr, bytesize, hStream));
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	CHARGED_PTR_ALLOC(vgpu_stream_device(hStream), bytesize,
			  real_cuMemAllocAsync_ptsz(dptr, bytesize, hStream));
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
				 CUstream hStream)
{
	CHARGED_PTR_ALLOC(pool_device(pool, hStream), bytesize,
			  real_cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream));
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
				      CUstream hStream)
{
	CHARGED_PTR_ALLOC(pool_device(pool, hStream), bytesize,
			  real_cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream));
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
			    unsigned int ElementSizeBytes)
{
	CUdevice dev;
	struct charge c;
	uint64_t actual;
	CUresult r;

	VGPU_ENTER();
	if (dptr == NULL || pPitch == NULL)
		return real_cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
	dev = vgpu_current_device();
	/* Reserve with the usual 512-byte pitch, then settle on the pitch the driver chose. */
	if ((r = charge_begin(&c, dev, round_up(WidthInBytes, 512) * (uint64_t)Height)) != CUDA_SUCCESS)
		return r;
	r = real_cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
	if (r == CUDA_SUCCESS && c.didx >= 0) {
		actual = charge_size(dev, (uint64_t)*pPitch * Height);
		if (actual > c.bytes &&
		    vgpu_region_reserve(c.didx, actual - c.bytes, vgpu_mem_limit(dev)) < 0) {
			real_cuMemFree_v2(*dptr);
			vgpu_region_release(c.didx, c.bytes);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		if (actual < c.bytes)
			vgpu_region_release(c.didx, c.bytes - actual);
		c.bytes = actual;
	}
	return charge_end(&c, r, KIND_PTR, r == CUDA_SUCCESS ? *dptr : 0);
}

#define FREE_HOOK(kind, key, call)                                                                 \
	do {                                                                                       \
		struct freeing fr;                                                                 \
		vgpu_init();                                                                       \
		free_begin(&fr, (kind), (key));                                                    \
		return free_end(&fr, call);                                                        \
	} while (0)

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	FREE_HOOK(KIND_PTR, dptr, real_cuMemFree_v2(dptr));
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	FREE_HOOK(KIND_PTR, dptr, real_cuMemFreeAsync(dptr, hStream));
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	FREE_HOOK(KIND_PTR, dptr, real_cuMemFreeAsync_ptsz(dptr, hStream));
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
		     const CUmemAllocationProp *prop, unsigned long long flags)
{
	struct charge c;
	CUresult r;

	VGPU_ENTER();
	/* Only device-resident physical memory counts; host locations are host memory. */
	if (handle == NULL || prop == NULL || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return real_cuMemCreate(handle, size, prop, flags);
	if ((r = charge_begin(&c, prop->location.id, size)) != CUDA_SUCCESS)
		return r;
	r = real_cuMemCreate(handle, size, prop, flags);
	return charge_end(&c, r, KIND_HANDLE, r == CUDA_SUCCESS ? *handle : 0);
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	FREE_HOOK(KIND_HANDLE, handle, real_cuMemRelease(handle));
}

static uint64_t element_size(CUarray_format f, unsigned int channels)
{
	uint64_t per;

	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		per = 1;
		break;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		per = 2;
		break;
	default: /* 32-bit formats and anything newer: 4 bytes a channel, the widest scalar */
		per = 4;
		break;
	}
	return per * (channels ? channels : 1);
}

static uint64_t dim(size_t n)
{
	return n ? n : 1;
}

static CUresult charged_array(CUarray *pHandle, uint64_t bytes, CUresult (*create)(CUarray *, const void *),
			      const void *desc)
{
	struct charge c;
	CUresult r;

	if ((r = charge_begin(&c, vgpu_current_device(), bytes)) != CUDA_SUCCESS)
		return r;
	r = create(pHandle, desc);
	return charge_end(&c, r, KIND_ARRAY, r == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*pHandle : 0);
}

static CUresult create_2d(CUarray *h, const void *d)
{
	return real_cuArrayCreate_v2(h, d);
}

static CUresult create_3d(CUarray *h, const void *d)
{
	return real_cuArray3DCreate_v2(h, d);
}

CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
	VGPU_ENTER();
	if (pHandle == NULL || d == NULL)
		return real_cuArrayCreate_v2(pHandle, d);
	return charged_array(pHandle, dim(d->Width) * dim(d->Height) * element_size(d->Format, d->NumChannels),
			     create_2d, d);
}

CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	VGPU_ENTER();
	if (pHandle == NULL || d == NULL)
		return real_cuArray3DCreate_v2(pHandle, d);
	return charged_array(pHandle,
			     dim(d->Width) * dim(d->Height) * dim(d->Depth) *
				     element_size(d->Format, d->NumChannels),
			     create_3d, d);
}

CUresult cuArrayDestroy(CUarray hArray)
{
	FREE_HOOK(KIND_ARRAY, (uint64_t)(uintptr_t)hArray, real_cuArrayDestroy(hArray));
}

/* ---- virtualised queries ---- */
/* Usage as a query should report it: first free the slots of processes that died (kill -9
 * leaves their charge behind until someone sweeps). */
static uint64_t current_usage(int didx)
{
	vgpu_region_sweep(false); /* kill(pid, 0) per slot; the thorough sweep is for refusals */
	return vgpu_region_used(didx);
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Container view of a device with `limit`: total = limit (never above the physical size),
 * free = total - usage, never negative. */
static void virtual_info(uint64_t limit, uint64_t used, unsigned long long *total,
			 unsigned long long *free_)
{
	uint64_t t = min_u64(limit, *total);

	*free_ = min_u64(t > used ? t - used : 0, *free_);
	*total = t;
}

/* Contexts: none on a device the limits file does not name, so its driver context memory (the
 * card's, outside any share) is never taken. A malformed file is refused at the allocation, as
 * before; the driver reports its own errors otherwise. */
static bool ctx_denied(CUdevice dev)
{
	vgpu_init();
	return !vgpu_cfg.failed && vgpu_dev_denied(dev);
}

CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return ctx_denied(dev) ? CUDA_ERROR_INVALID_DEVICE : real_cuCtxCreate(pctx, flags, dev);
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return ctx_denied(dev) ? CUDA_ERROR_INVALID_DEVICE : real_cuCtxCreate_v2(pctx, flags, dev);
}

CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
			unsigned int flags, CUdevice dev)
{
	return ctx_denied(dev) ? CUDA_ERROR_INVALID_DEVICE
			       : real_cuCtxCreate_v3(pctx, paramsArray, numParams, flags, dev);
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
			CUdevice dev)
{
	return ctx_denied(dev) ? CUDA_ERROR_INVALID_DEVICE
			       : real_cuCtxCreate_v4(pctx, ctxCreateParams, flags, dev);
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	return ctx_denied(dev) ? CUDA_ERROR_INVALID_DEVICE : real_cuDevicePrimaryCtxRetain(pctx, dev);
}

CUresult cuMemGetInfo_v2(size_t *free_, size_t *total)
{
	unsigned long long t, f;
	uint64_t limit;
	CUdevice dev;
	CUresult r;
	int didx;

	VGPU_ENTER();
	r = real_cuMemGetInfo_v2(free_, total);
	if (r != CUDA_SUCCESS || free_ == NULL || total == NULL)
		return r;
	dev = vgpu_current_device();
	if (vgpu_dev_denied(dev)) {
		*free_ = *total = 0;
		return CUDA_ERROR_INVALID_DEVICE;
	}
	if ((limit = vgpu_mem_limit(dev)) == 0 || (didx = vgpu_dev_index(dev)) < 0)
		return r;
	t = *total;
	f = *free_;
	virtual_info(limit, current_usage(didx), &t, &f);
	*total = (size_t)t;
	*free_ = (size_t)f;
	return r;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	uint64_t limit;
	CUresult r;

	VGPU_ENTER();
	if (vgpu_dev_denied(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	r = real_cuDeviceTotalMem_v2(bytes, dev);
	if (r == CUDA_SUCCESS && bytes && (limit = vgpu_mem_limit(dev)) != 0)
		*bytes = (size_t)min_u64(limit, *bytes);
	return r;
}

/* The container's view of an NVML device; false when it has no limit (the driver's view). */
static bool nvml_view(nvmlDevice_t device, const char *uuid, unsigned long long *total,
		      unsigned long long *free_, unsigned long long *used)
{
	uint64_t limit, usage;
	int didx;

	if (!vgpu_cfg.any_mem_limit || (didx = vgpu_nvml_dev_index(device, uuid, &limit)) < 0 ||
	    limit == 0)
		return false;
	usage = current_usage(didx);
	virtual_info(limit, usage, total, free_);
	*used = min_u64(usage, *total);
	return true;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	nvmlReturn_t r;

	vgpu_init();
	if (vgpu_cfg.failed || vgpu_nvml_denied(device, uuid))
		return NVML_ERROR_NO_PERMISSION;
	r = real_nvmlDeviceGetMemoryInfo(device, memory);
	if (r == NVML_SUCCESS && memory)
		nvml_view(device, uuid, &memory->total, &memory->free, &memory->used);
	return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	nvmlReturn_t r;

	vgpu_init();
	if (vgpu_cfg.failed || vgpu_nvml_denied(device, uuid))
		return NVML_ERROR_NO_PERMISSION;
	r = real_nvmlDeviceGetMemoryInfo_v2(device, memory);
	if (r == NVML_SUCCESS && memory &&
	    nvml_view(device, uuid, &memory->total, &memory->free, &memory->used))
		memory->reserved = 0; /* driver reservations are outside the container's share */
	return r;
}
