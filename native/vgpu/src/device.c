/* One device index space: CUDA ordinals and NVML handles both map to region devices by UUID. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "region.h"
#include "vgpu.h"

static int dev_index[VGPU_MAX_DEVICES]; /* region index + 1; 0 = not looked up yet */

void vgpu_format_uuid(const CUuuid *u, char *buf, size_t len)
{
	const unsigned char *b = (const unsigned char *)u->bytes;

	snprintf(buf, len,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
		 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
		 b[14], b[15]);
}

int vgpu_dev_uuid(CUdevice dev, char *buf, size_t len)
{
	CUuuid u;

	if (real_cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS) {
		snprintf(buf, len, "cuda-ordinal-%d", (int)dev); /* still one key per device */
		return -1;
	}
	vgpu_format_uuid(&u, buf, len);
	return 0;
}

/* With a limits file: the file's slot of CUDA ordinal `dev`, found by its UUID; -1 when the file
 * does not name it (logged once per device) or its UUID cannot be read (not remembered: the
 * driver may not be initialised yet). */
static int file_slot_of(CUdevice dev)
{
	static int slot_plus2[VGPU_MAX_DEVICES]; /* 0: not looked up; 1: not in the file */
	char uuid[VGPU_UUID_LEN];
	int v, expected = 0;

	if (dev < 0 || dev >= VGPU_MAX_DEVICES)
		return -1;
	if ((v = __atomic_load_n(&slot_plus2[dev], __ATOMIC_ACQUIRE)) != 0)
		return v - 2;
	if (vgpu_dev_uuid(dev, uuid, sizeof(uuid)) < 0)
		return -1;
	v = vgpu_file_slot(&vgpu_cfg, uuid) + 2;
	if (__atomic_compare_exchange_n(&slot_plus2[dev], &expected, v, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE) && v == 1)
		LOG_ERR("CUDA device %d (%s) is not in %s: no context, memory or launches on it "
			"(fail closed)", (int)dev, uuid, VGPU_LIMITS_FILE);
	return v - 2;
}

/* The limits file's limits of `slot`, each lowered by CUDA ordinal `dev`'s own share (the
 * container's VGPU_CONTAINER_*; none for an ordinal out of range, e.g. -1: not known). */
static void file_limits(int slot, CUdevice dev, uint64_t *mem, unsigned int *sm)
{
	bool known = dev >= 0 && dev < VGPU_MAX_DEVICES;

	*mem = vgpu_lower_limit(vgpu_cfg.file_mem[slot], known ? vgpu_cfg.mem_limit[dev] : 0);
	*sm = (unsigned int)vgpu_lower_limit(vgpu_cfg.file_sm[slot],
					     known ? vgpu_cfg.sm_limit[dev] : 0);
}

bool vgpu_dev_denied(CUdevice dev)
{
	return vgpu_cfg.limits_file && file_slot_of(dev) < 0;
}

bool vgpu_nvml_denied(nvmlDevice_t device, char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE])
{
	if (real_nvmlDeviceGetUUID(device, uuid, NVML_DEVICE_UUID_V2_BUFFER_SIZE) != NVML_SUCCESS)
		uuid[0] = '\0';
	return vgpu_cfg.limits_file && (uuid[0] == '\0' || vgpu_file_slot(&vgpu_cfg, uuid) < 0);
}

uint64_t vgpu_mem_limit(CUdevice dev)
{
	uint64_t mem = 0;
	unsigned int sm;
	int slot;

	if (dev < 0 || dev >= VGPU_MAX_DEVICES)
		return 0;
	if (!vgpu_cfg.limits_file)
		return vgpu_cfg.mem_limit[dev];
	if ((slot = file_slot_of(dev)) >= 0)
		file_limits(slot, dev, &mem, &sm);
	return mem;
}

unsigned int vgpu_sm_limit(CUdevice dev)
{
	uint64_t mem;
	unsigned int sm = 0;
	int slot;

	if (dev < 0 || dev >= VGPU_MAX_DEVICES)
		return 0;
	if (!vgpu_cfg.limits_file)
		return vgpu_cfg.sm_limit[dev];
	if ((slot = file_slot_of(dev)) >= 0)
		file_limits(slot, dev, &mem, &sm);
	return sm;
}

bool vgpu_launch_denied(void)
{
	static int all_named; /* 0: not known yet; 1: every visible device is named; 2: not */
	int state = __atomic_load_n(&all_named, __ATOMIC_ACQUIRE), count = 0;
	CUdevice dev;

	if (!vgpu_cfg.limits_file || state == 1)
		return false;
	if (state == 0 && real_cuDeviceGetCount(&count) == CUDA_SUCCESS) {
		state = 1;
		for (int d = 0; d < count; d++)
			state = vgpu_dev_denied(d) ? 2 : state;
		__atomic_store_n(&all_named, state, __ATOMIC_RELEASE);
	}
	return state != 1 && (dev = vgpu_current_device()) >= 0 && vgpu_dev_denied(dev);
}

int vgpu_dev_index(CUdevice dev)
{
	char uuid[64];
	int idx;

	if (dev < 0 || dev >= VGPU_MAX_DEVICES)
		return -1;
	idx = __atomic_load_n(&dev_index[dev], __ATOMIC_ACQUIRE);
	if (idx > 0)
		return idx - 1;
	vgpu_dev_uuid(dev, uuid, sizeof(uuid));
	idx = vgpu_region_device(uuid, vgpu_mem_limit(dev), vgpu_sm_limit(dev));
	if (idx >= 0)
		__atomic_store_n(&dev_index[dev], idx + 1, __ATOMIC_RELEASE);
	return idx;
}

int vgpu_current_device(void)
{
	CUdevice dev;

	return real_cuCtxGetDevice(&dev) == CUDA_SUCCESS ? dev : -1;
}

static bool special_stream(CUstream s)
{
	return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

/* The context stream `s` was made in: cuStreamGetCtx_v2 where the driver has it (the first form
 * answers NOT_SUPPORTED for a green context's stream on CUDA 12 drivers), else cuStreamGetCtx.
 * Both are allowed while the stream captures a graph; cuStreamGetDevice is not on every driver. */
static CUresult stream_ctx(CUstream s, CUcontext *ctx)
{
	CUgreenCtx green = NULL;
	CUresult r = real_cuStreamGetCtx_v2(s, ctx, &green);

	return r == CUDA_ERROR_NOT_SUPPORTED ? real_cuStreamGetCtx(s, ctx) : r;
}

/* The device of context `ctx`: the current one's directly, another's by making it current for
 * the one question (pushed and popped: the thread's own context stack is left as it was). */
static int ctx_device(CUcontext ctx)
{
	CUcontext cur = NULL, popped = NULL;
	CUdevice dev;
	CUresult r;

	if (real_cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx)
		return vgpu_current_device();
	if (real_cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS)
		return -1;
	r = real_cuCtxGetDevice(&dev);
	real_cuCtxPopCurrent_v2(&popped);
	return r == CUDA_SUCCESS ? dev : -1;
}

/* Stream-ordered memory lives on the stream's device, whatever context is current: charging the
 * current one instead let an allocation on device 1 pass against device 0's room. */
int vgpu_stream_device(CUstream s)
{
	CUcontext ctx = NULL;
	int dev;

	if (special_stream(s) || stream_ctx(s, &ctx) != CUDA_SUCCESS || ctx == NULL ||
	    (dev = ctx_device(ctx)) < 0)
		return vgpu_current_device(); /* charging some device beats charging none */
	return dev;
}

int vgpu_nvml_dev_index(nvmlDevice_t device, const char *uuid, uint64_t *limit)
{
	char u[64];
	unsigned int index;
	int count = 0, ordinal = -1;

	*limit = 0;
	if (uuid[0] == '\0' || real_nvmlDeviceGetIndex(device, &index) != NVML_SUCCESS)
		return -1;
	/* NVML numbers devices as the machine does, CUDA as CUDA_VISIBLE_DEVICES says: the
	 * limit is the one of the CUDA ordinal with this UUID. Before cuInit, the container's NVML
	 * index stands in for the ordinal (the runtime exposes the container's devices in order). */
	if (real_cuDeviceGetCount(&count) == CUDA_SUCCESS) {
		for (int d = 0; d < count && d < VGPU_MAX_DEVICES && ordinal < 0; d++)
			if (vgpu_dev_uuid(d, u, sizeof(u)) == 0 && strcmp(u, uuid) == 0)
				ordinal = d;
	} else if (index < VGPU_MAX_DEVICES) {
		ordinal = (int)index;
	}
	if (vgpu_cfg.limits_file) { /* by UUID; the ordinal only for the container's own share */
		int slot = vgpu_file_slot(&vgpu_cfg, uuid);
		unsigned int sm;
		if (slot < 0)
			return -1;
		file_limits(slot, ordinal, limit, &sm);
		return vgpu_region_device(uuid, *limit, sm);
	}
	if (ordinal < 0)
		return vgpu_region_device(uuid, 0, 0); /* not this process's device: usage only */
	*limit = vgpu_mem_limit(ordinal);
	return vgpu_region_device(uuid, *limit, vgpu_sm_limit(ordinal));
}
