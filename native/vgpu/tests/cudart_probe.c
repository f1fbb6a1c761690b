/* Goes through the CUDA runtime as an application would: dlopen libcudart, ask for the device
 * count (the runtime initialises: dlopen libcuda.so.1, dlsym cuGetProcAddress_v2, then one
 * lookup per driver entry point). run.sh checks libvgpu's log of those lookups. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	void *h = argc > 1 ? dlopen(argv[1], RTLD_NOW) : NULL;
	int (*count)(int *);
	int n = -1;

	if (h == NULL) {
		fprintf(stderr, "cudart_probe: %s\n", dlerror());
		return 2;
	}
	count = (int (*)(int *))dlsym(h, "cudaGetDeviceCount");
	if (count == NULL)
		return 2;
	/* The fake driver has no private export tables, so the runtime gives up after its
	 * lookups; the lookups are what this probe is for. */
	printf("cudaGetDeviceCount = %d (%d devices)\n", count(&n), n);
	return 0;
}
