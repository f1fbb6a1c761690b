/* A library that looks a symbol up with RTLD_NEXT, to check dlsym keeps the caller's identity. */
#include <dlfcn.h>

__attribute__((visibility("default"))) int probe_target(void)
{
	return 42;
}

/* Objects after this library define no probe_target: the right answer is NULL. */
__attribute__((visibility("default"))) void *probe_lookup_next(void)
{
	return dlsym(RTLD_NEXT, "probe_target");
}
