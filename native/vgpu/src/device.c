/* One device index space: CUDA ordinals and NVML handles both map to region devices by UUID. */
#include <stdio.h>
#include <string.h>

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

uint64_t vgpu_mem_limit(CUdevice dev)
{
	return dev >= 0 && dev < VGPU_MAX_DEVICES ? vgpu_cfg.mem_limit[dev] : 0;
}

unsigned int vgpu_sm_limit(CUdevice dev)
{
	return dev >= 0 && dev < VGPU_MAX_DEVICES ? vgpu_cfg.sm_limit[dev] : 0;
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

int vgpu_nvml_dev_index(nvmlDevice_t device, uint64_t *limit)
{
	char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], u[64];
	unsigned int index;
	int count = 0, ordinal = -1;

	*limit = 0;
	if (real_nvmlDeviceGetUUID(device, uuid, sizeof(uuid)) != NVML_SUCCESS ||
	    real_nvmlDeviceGetIndex(device, &index) != NVML_SUCCESS)
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
	if (ordinal < 0)
		return vgpu_region_device(uuid, 0, 0); /* not this process's device: usage only */
	*limit = vgpu_mem_limit(ordinal);
	return vgpu_region_device(uuid, *limit, vgpu_sm_limit(ordinal));
}
