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
 * POOL_HOST), so that allocations from it are charged where the pool keeps its memory.
 * KIND_GRAPH_ALLOC: a graph memory node's charge, by its address, `owner` its graph.
 * KIND_EXEC: no charge, an executable graph (by handle) instantiated from graph `owner`, which
 * holds that graph's memory nodes charged while it lives. */
enum alloc_kind {
	KIND_PTR = 1,
	KIND_HANDLE = 2,
	KIND_ARRAY = 3,
	KIND_POOL = 4,
	KIND_GRAPH_ALLOC = 5,
	KIND_EXEC = 6,
};

/* ---- what we charged, by pointer/handle: open addressing, linear probing ---- */
struct entry {
	uint64_t key; /* 0 = empty */
	uint8_t kind; /* 0 with key != 0: deleted */
	int8_t didx;
	uint8_t flags; /* KIND_GRAPH_ALLOC: GRAPH_*; KIND_EXEC: EXEC_* */
	uint64_t bytes;
	uint64_t owner; /* KIND_GRAPH_ALLOC, KIND_EXEC: the graph */
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

static int table_put_entry(struct entry e)
{
	size_t i, tomb = SIZE_MAX, cap;
	uint64_t key = e.key;
	uint8_t kind = e.kind;
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
	table[i] = e;
out:
	pthread_mutex_unlock(&table_lock);
	return rc;
}

static int table_put(uint64_t key, uint8_t kind, int didx, uint64_t bytes)
{
	return table_put_entry((struct entry){.key = key, .kind = kind, .didx = (int8_t)didx,
					      .bytes = bytes});
}

/* The live entry for (key, kind), or NULL; the table lock is held. */
static struct entry *table_find(uint64_t key, uint8_t kind)
{
	size_t i;

	if (table_cap == 0)
		return NULL;
	i = slot_of(key, kind, table_cap);
	for (; table[i].key != 0; i = (i + 1) & (table_cap - 1))
		if (table[i].key == key && table[i].kind == kind)
			return &table[i];
	return NULL;
}

/* Removes the entry; returns 0 and a copy of it, or -1 if there is none. */
static int table_take_entry(uint64_t key, uint8_t kind, struct entry *out)
{
	struct entry *e;

	lock_table();
	if ((e = table_find(key, kind)) != NULL) {
		*out = *e;
		e->kind = 0; /* tombstone: keeps probe chains intact */
	}
	pthread_mutex_unlock(&table_lock);
	return e != NULL ? 0 : -1;
}

/* Removes the entry; returns 0 and its charge, or -1 if we never charged it. */
static int table_take(uint64_t key, uint8_t kind, int *didx, uint64_t *bytes)
{
	struct entry e;

	if (table_take_entry(key, kind, &e) < 0)
		return -1;
	*didx = e.didx;
	*bytes = e.bytes;
	return 0;
}

/* Every entry of `kind` that `owner` holds passes to `heir` with `flags` added; returns how
 * many there are (heir == owner: flags only). */
static size_t table_reown(uint64_t owner, uint8_t kind, uint64_t heir, uint8_t flags)
{
	size_t n = 0;

	lock_table();
	for (size_t i = 0; i < table_cap; i++)
		if (table[i].key != 0 && table[i].kind == kind && table[i].owner == owner) {
			table[i].owner = heir;
			table[i].flags |= flags;
			n++;
		}
	pthread_mutex_unlock(&table_lock);
	return n;
}

/* The key of an entry of `kind` that `owner` holds, or 0. */
static uint64_t table_key_owned(uint64_t owner, uint8_t kind)
{
	uint64_t key = 0;

	lock_table();
	for (size_t i = 0; i < table_cap && key == 0; i++)
		if (table[i].key != 0 && table[i].kind == kind && table[i].owner == owner)
			key = table[i].key;
	pthread_mutex_unlock(&table_lock);
	return key;
}

/* Removes every entry of `kind` that `owner` holds into *out (malloc'd); returns how many. When
 * there is no memory for the list, nothing is removed (their charges stay: over, never under). */
static size_t table_take_owned(uint64_t owner, uint8_t kind, struct entry **out)
{
	size_t n = 0, k = 0;

	*out = NULL;
	lock_table();
	for (size_t i = 0; i < table_cap; i++)
		n += table[i].key != 0 && table[i].kind == kind && table[i].owner == owner;
	if (n > 0 && (*out = malloc(n * sizeof(**out))) != NULL)
		for (size_t i = 0; i < table_cap; i++)
			if (table[i].key != 0 && table[i].kind == kind && table[i].owner == owner) {
				(*out)[k++] = table[i];
				table[i].kind = 0;
			}
	pthread_mutex_unlock(&table_lock);
	return k;
}

/* The entry's device index, left in place; 0, or -1 if there is none. */
static int table_get(uint64_t key, uint8_t kind, int *didx)
{
	struct entry *e;

	lock_table();
	if ((e = table_find(key, kind)) != NULL)
		*didx = e->didx;
	pthread_mutex_unlock(&table_lock);
	return e != NULL ? 0 : -1;
}

/* Sets `flags` on the entry (key, kind) when `owner` holds it. */
static void table_flag(uint64_t key, uint8_t kind, uint64_t owner, uint8_t flags)
{
	struct entry *e;

	lock_table();
	if ((e = table_find(key, kind)) != NULL && e->owner == owner)
		e->flags |= flags;
	pthread_mutex_unlock(&table_lock);
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

/* ---- stream capture: stream-ordered calls on a capturing stream make graph memory nodes ---- */
static CUresult graph_charge_end(struct charge *c, CUresult r, CUgraph graph, CUdeviceptr dptr);
static CUresult graph_free_node_added(CUresult r, CUgraph graph, CUdeviceptr dptr);

/* The graph stream `s` is capturing into, or NULL. `ptsz`: a NULL stream is the thread's own
 * (the _ptsz entry points'), not the legacy one. */
static CUgraph capture_graph(CUstream s, bool ptsz)
{
	CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
	CUgraph graph = NULL;

	if (real_cuStreamGetCaptureInfo_v2(ptsz && s == NULL ? CU_STREAM_PER_THREAD : s, &status,
					   NULL, &graph, NULL, NULL) != CUDA_SUCCESS ||
	    status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
		return NULL;
	return graph;
}

/* A stream-ordered allocation: charged to `dev` by its address, or, while `stream` captures,
 * as a memory node of the capture's graph (the memory comes with each launch). */
#define CHARGED_STREAM_ALLOC(dev, bytes, stream, ptsz, call)                                       \
	do {                                                                                       \
		struct charge c;                                                                   \
		CUgraph graph;                                                                     \
		CUresult r;                                                                        \
		VGPU_ENTER();                                                                      \
		if (dptr == NULL)                                                                  \
			return call;                                                               \
		graph = capture_graph((stream), (ptsz));                                           \
		if ((r = charge_begin(&c, (dev), (bytes))) != CUDA_SUCCESS)                        \
			return r;                                                                  \
		r = call;                                                                          \
		if (graph != NULL)                                                                 \
			return graph_charge_end(&c, r, graph, r == CUDA_SUCCESS ? *dptr : 0);      \
		return charge_end(&c, r, KIND_PTR, r == CUDA_SUCCESS ? *dptr : 0);                 \
	} while (0)

/* cuMemAllocAsync takes from the current pool of the stream's device, which is always that
 * device's own memory. */
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	CHARGED_STREAM_ALLOC(vgpu_stream_device(hStream), bytesize, hStream, false,
			     real_cuMemAllocAsync(dptr, bytesize, hStream));
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	CHARGED_STREAM_ALLOC(vgpu_stream_device(hStream), bytesize, hStream, true,
			     real_cuMemAllocAsync_ptsz(dptr, bytesize, hStream));
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
				 CUstream hStream)
{
	CHARGED_STREAM_ALLOC(pool_device(pool, hStream), bytesize, hStream, false,
			     real_cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream));
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
				      CUstream hStream)
{
	CHARGED_STREAM_ALLOC(pool_device(pool, hStream), bytesize, hStream, true,
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

/* A free on a capturing stream is a free node of the capture's graph: nothing is freed now
 * (the memory goes when the graph launches), so no charge is released here; one of that
 * graph's own memory nodes is noted as freed by it. */
#define STREAM_FREE(stream, ptsz, call)                                                            \
	do {                                                                                       \
		CUgraph graph;                                                                     \
		vgpu_init();                                                                       \
		if ((graph = capture_graph((stream), (ptsz))) != NULL)                             \
			return graph_free_node_added(call, graph, dptr);                           \
		FREE_HOOK(KIND_PTR, dptr, call);                                                   \
	} while (0)

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	STREAM_FREE(hStream, false, real_cuMemFreeAsync(dptr, hStream));
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	STREAM_FREE(hStream, true, real_cuMemFreeAsync_ptsz(dptr, hStream));
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

/* ---- graph memory nodes ----
 * A memory node's memory is mapped at instantiation or launch, where no allocation call runs:
 * the node is charged when it is added (refused past the share like cuMemAlloc), to the device
 * its pool properties name. The charge stays while its graph or an executable graph made from it
 * lives (an executable graph outlives its graph and may launch again). Then it is released,
 * unless the graph was instantiated and does not free the memory itself: a launch may have left
 * it allocated, so the charge moves to the address and cuMemFree/cuMemFreeAsync releases it. */
enum {
	GRAPH_FREES_IT = 1,     /* a free node of the same graph frees it */
	GRAPH_INSTANTIATED = 2, /* an executable graph was made with this node */
	GRAPH_UNTRACKED = 4,    /* that executable graph could not be recorded: charged for good */
};
enum { EXEC_GRAPH_GONE = 1 }; /* its graph was destroyed first */

/* Set once a memory node is charged: until then instantiating and destroying graphs (most
 * processes never make a memory node) skip the table scans. */
static bool graph_nodes_seen;

/* Where a memory node's memory lives: its pool's device; host memory (-2) is not charged; no
 * location we know, the current context's device (over-charging beats not charging). */
static int node_device(const CUmemPoolProps *props)
{
	int home = pool_home(props);

	return home == -1 ? vgpu_current_device() : home;
}

static CUresult graph_charge_end(struct charge *c, CUresult r, CUgraph graph, CUdeviceptr dptr)
{
	struct entry e = {.key = dptr, .kind = KIND_GRAPH_ALLOC, .didx = (int8_t)c->didx,
			  .bytes = c->bytes, .owner = (uint64_t)(uintptr_t)graph};

	if (c->didx < 0)
		return r;
	if (r != CUDA_SUCCESS || dptr == 0 || table_put_entry(e) < 0)
		vgpu_region_release(c->didx, c->bytes);
	else
		__atomic_store_n(&graph_nodes_seen, true, __ATOMIC_RELEASE);
	return r;
}

#define CHARGED_GRAPH_ALLOC(graph, params, call)                                                   \
	do {                                                                                       \
		struct charge c;                                                                   \
		CUresult r;                                                                        \
		VGPU_ENTER();                                                                      \
		if ((params) == NULL)                                                              \
			return call;                                                               \
		r = charge_begin(&c, node_device(&(params)->poolProps), (params)->bytesize);       \
		if (r != CUDA_SUCCESS)                                                             \
			return r;                                                                  \
		r = call;                                                                          \
		return graph_charge_end(&c, r, (graph), r == CUDA_SUCCESS ? (params)->dptr : 0);   \
	} while (0)

static CUresult graph_free_node_added(CUresult r, CUgraph graph, CUdeviceptr dptr)
{
	if (r == CUDA_SUCCESS)
		table_flag(dptr, KIND_GRAPH_ALLOC, (uint64_t)(uintptr_t)graph, GRAPH_FREES_IT);
	return r;
}

CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
				const CUgraphNode *dependencies, size_t numDependencies,
				CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
	CHARGED_GRAPH_ALLOC(hGraph, nodeParams,
			    real_cuGraphAddMemAllocNode(phGraphNode, hGraph, dependencies,
							numDependencies, nodeParams));
}

CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph,
			       const CUgraphNode *dependencies, size_t numDependencies,
			       CUdeviceptr dptr)
{
	vgpu_init();
	return graph_free_node_added(real_cuGraphAddMemFreeNode(phGraphNode, hGraph, dependencies,
								numDependencies, dptr),
				     hGraph, dptr);
}

/* cuGraphAddNode[_v2] make memory nodes too; every other node type passes through. */
#define GRAPH_ADD_NODE(graph, params, call)                                                        \
	do {                                                                                       \
		vgpu_init();                                                                       \
		if ((params) != NULL && (params)->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)            \
			CHARGED_GRAPH_ALLOC(graph, &(params)->alloc, call);                        \
		if ((params) != NULL && (params)->type == CU_GRAPH_NODE_TYPE_MEM_FREE)             \
			return graph_free_node_added(call, graph, (params)->free.dptr);            \
		return call;                                                                       \
	} while (0)

CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			size_t numDependencies, CUgraphNodeParams *nodeParams)
{
	GRAPH_ADD_NODE(hGraph, nodeParams,
		       real_cuGraphAddNode(phGraphNode, hGraph, dependencies, numDependencies,
					   nodeParams));
}

CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
			   const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData,
			   size_t numDependencies, CUgraphNodeParams *nodeParams)
{
	GRAPH_ADD_NODE(hGraph, nodeParams,
		       real_cuGraphAddNode_v2(phGraphNode, hGraph, dependencies, dependencyData,
					      numDependencies, nodeParams));
}

/* After an instantiation: the graph's memory nodes are held by the executable graph too. */
static CUresult graph_instantiated(CUresult r, CUgraphExec *exec, CUgraph graph)
{
	uint64_t owner = (uint64_t)(uintptr_t)graph;
	struct entry e = {.kind = KIND_EXEC, .owner = owner};

	if (r != CUDA_SUCCESS || exec == NULL || *exec == NULL ||
	    !__atomic_load_n(&graph_nodes_seen, __ATOMIC_ACQUIRE))
		return r;
	e.key = (uint64_t)(uintptr_t)*exec;
	if (table_reown(owner, KIND_GRAPH_ALLOC, owner, GRAPH_INSTANTIATED) > 0 &&
	    table_put_entry(e) < 0)
		table_reown(owner, KIND_GRAPH_ALLOC, owner, GRAPH_UNTRACKED);
	return r;
}

CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
			    char *logBuffer, size_t bufferSize)
{
	vgpu_init();
	return graph_instantiated(real_cuGraphInstantiate(phGraphExec, hGraph, phErrorNode,
							  logBuffer, bufferSize),
				  phGraphExec, hGraph);
}

CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
			       char *logBuffer, size_t bufferSize)
{
	vgpu_init();
	return graph_instantiated(real_cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode,
							     logBuffer, bufferSize),
				  phGraphExec, hGraph);
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
				     unsigned long long flags)
{
	vgpu_init();
	return graph_instantiated(real_cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags),
				  phGraphExec, hGraph);
}

CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
				      CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	vgpu_init();
	return graph_instantiated(
		real_cuGraphInstantiateWithParams(phGraphExec, hGraph, instantiateParams),
		phGraphExec, hGraph);
}

CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
					   CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	vgpu_init();
	return graph_instantiated(
		real_cuGraphInstantiateWithParams_ptsz(phGraphExec, hGraph, instantiateParams),
		phGraphExec, hGraph);
}

/* Hands back the graph memory the driver keeps cached for graphs on the devices of region
 * indices `released` (a bit each): released charges must not leave pages behind. */
static void trim_graph_memory(uint32_t released)
{
	int count = 0;

	if (released == 0 || real_cuDeviceGetCount(&count) != CUDA_SUCCESS)
		return;
	for (int d = 0; d < count && d < VGPU_MAX_DEVICES; d++) {
		int didx = vgpu_dev_index(d);
		if (didx >= 0 && didx < 32 && (released & (1u << didx)))
			real_cuDeviceGraphMemTrim(d);
	}
}

/* Neither the graph nor an executable graph of it is left: its memory nodes' charges go, or
 * move to their addresses where a launch may have left the memory allocated. */
static void graph_settle(uint64_t owner)
{
	struct entry *nodes;
	size_t n = table_take_owned(owner, KIND_GRAPH_ALLOC, &nodes);
	uint32_t released = 0;

	for (size_t i = 0; i < n; i++) {
		struct entry e = nodes[i];
		if (e.flags & GRAPH_UNTRACKED) {
			e.owner = 0; /* no graph's: charged until the process ends */
			table_put_entry(e);
		} else if ((e.flags & GRAPH_INSTANTIATED) && !(e.flags & GRAPH_FREES_IT) &&
			   table_put(e.key, KIND_PTR, e.didx, e.bytes) == 0) {
			continue;
		} else {
			vgpu_region_release(e.didx, e.bytes);
			released |= e.didx < 32 ? 1u << e.didx : 0;
		}
	}
	free(nodes);
	trim_graph_memory(released);
}

/* The record goes first, as with frees: once destroyed, the handle may name a new one. */
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	uint64_t key = (uint64_t)(uintptr_t)hGraphExec;
	struct entry e;
	CUresult r;
	int had;

	vgpu_init();
	had = key != 0 && table_take_entry(key, KIND_EXEC, &e) == 0;
	r = real_cuGraphExecDestroy(hGraphExec);
	if (had && r != CUDA_SUCCESS)
		table_put_entry(e);
	else if (had && (e.flags & EXEC_GRAPH_GONE))
		graph_settle(e.owner);
	return r;
}

/* With an executable graph of it left (one at most: the driver allows one instantiation at a
 * time of a graph with memory nodes), the nodes pass to that executable graph, so that a new
 * graph given the same handle is not settled with it. */
CUresult cuGraphDestroy(CUgraph hGraph)
{
	uint64_t owner = (uint64_t)(uintptr_t)hGraph, exec;
	CUresult r;

	vgpu_init();
	r = real_cuGraphDestroy(hGraph);
	if (r != CUDA_SUCCESS || owner == 0 ||
	    !__atomic_load_n(&graph_nodes_seen, __ATOMIC_ACQUIRE))
		return r;
	if ((exec = table_key_owned(owner, KIND_EXEC)) == 0) {
		graph_settle(owner);
	} else {
		table_reown(owner, KIND_GRAPH_ALLOC, exec, 0);
		table_reown(owner, KIND_EXEC, exec, EXEC_GRAPH_GONE);
	}
	return r;
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
