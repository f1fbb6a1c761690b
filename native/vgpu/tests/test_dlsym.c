/* Our dlsym must be invisible: RTLD_NEXT is resolved from the real caller (HAMi #2903), repeated
 * lookups answer the same (HAMi-core #279), other handles and names pass straight through. */
#include "common.h"

static void *probe_lib(void)
{
	const char *dir = getenv("TEST_LIB_DIR");
	char path[4096];

	snprintf(path, sizeof(path), "%s/libnextprobe.so", dir ? dir : ".");
	return dlopen(path, RTLD_NOW | RTLD_GLOBAL);
}

static void rtld_next_is_resolved_from_the_caller(void)
{
	void *h = probe_lib();
	void *(*lookup)(void);

	CHECK(h != NULL);
	if (h == NULL)
		return;
	lookup = (void *(*)(void))dlsym(h, "probe_lookup_next");
	CHECK(lookup != NULL);
	/* From the library, nothing after it defines probe_target. Were libvgpu taken for the
	 * caller, "next" would start after libvgpu and find the library's own definition. */
	if (lookup)
		CHECK(lookup() == NULL);
	/* From the executable, the next definition is the library's. */
	CHECK(dlsym(RTLD_NEXT, "probe_target") == dlsym(h, "probe_target"));
}

static void repeated_lookups_answer_the_same(void)
{
	void *a = dlsym(RTLD_NEXT, "malloc"), *b = dlsym(RTLD_NEXT, "malloc");

	CHECK(a != NULL);
	CHECK(a == b);
	for (int i = 0; i < 1000; i++)
		CHECK(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") == (void *)cuMemAlloc_v2);
}

static void other_handles_and_names_pass_through(void)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);

	CHECK(libc != NULL && dlsym(libc, "strlen") != NULL);
	CHECK(dlsym(libc, "cuMemAlloc_v2") == NULL); /* libc has no such symbol */
	CHECK(dlsym(cuda, "cuNoSuchFunction") == NULL);
	CHECK(dlsym(cuda, "cuCtxSynchronize") == (void *)cuCtxSynchronize);
	CHECK(dlsym(cuda, "fake_cuda_launches") != NULL);
}

int main(int argc, char **argv)
{
	static const struct check_case cases[] = {
		CASE(rtld_next_is_resolved_from_the_caller),
		CASE(repeated_lookups_answer_the_same),
		CASE(other_handles_and_names_pass_through),
	};
	return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
