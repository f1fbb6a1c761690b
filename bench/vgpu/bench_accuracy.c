/* Memory-limit accuracy: how much of CUDA_DEVICE_MEMORY_LIMIT an application can really fill,
 * and how far past it the driver's memory goes. Allocates `chunk` bytes until refused, then
 * halves the chunk down to 1 MiB and goes on, like an allocator filling the last gaps.
 * Prints "<usable bytes> <device bytes in use> <limit>". */
#include "common.h"

int main(int argc, char **argv)
{
	uint64_t chunk = argc > 1 ? strtoull(argv[1], NULL, 10) : 64ULL << 20, usable = 0;
	size_t f, total;
	CUdeviceptr p;

	if (ctx_on(0) != 0 || cuMemGetInfo_v2(&f, &total) != CUDA_SUCCESS)
		return 1;
	for (; chunk >= (1ULL << 20); chunk /= 2)
		while (cuMemAlloc_v2(&p, chunk) == CUDA_SUCCESS)
			usable += chunk;
	printf("%llu %llu %llu\n", (unsigned long long)usable,
	       (unsigned long long)fake_cuda_memory_used(0), (unsigned long long)total);
	return 0;
}
