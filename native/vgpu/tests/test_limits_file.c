/* The node agent's limits file at libvgpu's compiled-in path (/etc/vgpu-bridge/limits.conf, here
 * in a private mount namespace: tests/limits_ns.h), read by the preloaded library itself: the
 * file is the ceiling and the environment may only lower it; a malformed file, a link or a FIFO
 * there fails closed, without blocking. (The parsing table is unit_config's.) Run with
 * CUDA_DEVICE_MEMORY_SHARED_CACHE set to a fresh region and TEST_TMP to a scratch dir. */
#include "limits_ns.h"

#define FILE_1GI "vgpu-bridge-limits 1\nCUDA_DEVICE_MEMORY_LIMIT=1Gi\n"

static const char *err_file(const char *name)
{
	static char path[512];

	snprintf(path, sizeof(path), "%s/%s.%d.err", getenv("TEST_TMP") ? getenv("TEST_TMP") : "/tmp",
		 name, (int)getpid());
	return path;
}

static int file_has(const char *path, const char *needle)
{
	char line[1024];
	int found = 0;
	FILE *f = fopen(path, "r");

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	if (f)
		fclose(f);
	return found;
}

static void raising_is_ignored(void)
{
	static const char *const raise[] = {"CUDA_DEVICE_MEMORY_LIMIT=8Gi", "CUDA_DEVICE_MEMORY_LIMIT_0=8Gi", NULL};
	const char *err = err_file("raise");

	CHECK_EQ(run_alloc_worker(2 * GiB, raise, err), ALLOC_OUT_OF_MEMORY);
	CHECK(file_has(err, "the environment asks for more than " VGPU_LIMITS_FILE));
	CHECK_EQ(run_alloc_worker(768 * MiB, raise, NULL), ALLOC_OK);
}

static void the_environment_cannot_raise_a_limit_of_the_file(void)
{
	in_a_container(FILE_1GI, raising_is_ignored);
}

static void lowering_wins(void)
{
	static const char *const lower[] = {"CUDA_DEVICE_MEMORY_LIMIT=256m", NULL};

	CHECK_EQ(run_alloc_worker(512 * MiB, lower, NULL), ALLOC_OUT_OF_MEMORY);
	CHECK_EQ(run_alloc_worker(128 * MiB, lower, NULL), ALLOC_OK);
}

static void the_environment_may_lower_a_limit_of_the_file(void)
{
	in_a_container(FILE_1GI, lowering_wins);
}

/* An app container sharing its init container's claim (sized for the init's 1 GiB): its own
 * 256 MiB holds, and its own variable cannot lift it past the claim's. */
static void the_containers_own_share_holds(void)
{
	static const char *const app[] = {"CUDA_DEVICE_MEMORY_LIMIT_0=1Gi",
					  "VGPU_CONTAINER_MEMORY_LIMIT_0=256m", NULL};
	static const char *const greedy[] = {"VGPU_CONTAINER_MEMORY_LIMIT_0=8Gi", NULL};

	CHECK_EQ(run_alloc_worker(512 * MiB, app, NULL), ALLOC_OUT_OF_MEMORY);
	CHECK_EQ(run_alloc_worker(128 * MiB, app, NULL), ALLOC_OK);
	CHECK_EQ(run_alloc_worker(2 * GiB, greedy, NULL), ALLOC_OUT_OF_MEMORY);
	CHECK_EQ(run_alloc_worker(768 * MiB, greedy, NULL), ALLOC_OK);
}

static void a_container_sharing_a_claim_keeps_its_own_lower_share(void)
{
	in_a_container(FILE_1GI, the_containers_own_share_holds);
}

static void refused_naming_the_file(void)
{
	const char *err = err_file("malformed");

	CHECK_EQ(run_alloc_worker(MiB, NULL, err), ALLOC_NOT_PERMITTED);
	CHECK(file_has(err, VGPU_LIMITS_FILE));
	CHECK(file_has(err, "fail closed"));
}

static void a_malformed_file_fails_closed(void)
{
	in_a_container("vgpu-bridge-limits 2\nCUDA_DEVICE_MEMORY_LIMIT=1Gi\n", refused_naming_the_file);
	in_a_container("vgpu-bridge-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_16=1Gi\n", refused_naming_the_file);
}

/* In place of the file: a link to a good file the tenant could have written. */
static void a_link_there(void)
{
	int fd = open(LIMITS_DIR "/elsewhere", O_WRONLY | O_CREAT, 0444);

	CHECK(fd >= 0 && write(fd, "vgpu-bridge-limits 1\n", 21) == 21 && close(fd) == 0);
	CHECK(symlink(LIMITS_DIR "/elsewhere", VGPU_LIMITS_FILE) == 0);
	refused_naming_the_file();
}

/* ... a FIFO nobody writes: a blocking open would hang every CUDA process of the container (the
 * worker's alarm ends it instead, and the case fails). */
static void a_fifo_there(void)
{
	CHECK(mkfifo(VGPU_LIMITS_FILE, 0644) == 0);
	refused_naming_the_file();
}

static void a_link_or_fifo_in_place_of_the_file_fails_closed_without_hanging(void)
{
	in_a_container("", a_link_there);
	in_a_container("", a_fifo_there);
}

int main(int argc, char **argv)
{
	static const struct check_case cases[] = {
		CASE(the_environment_cannot_raise_a_limit_of_the_file),
		CASE(the_environment_may_lower_a_limit_of_the_file),
		CASE(a_container_sharing_a_claim_keeps_its_own_lower_share),
		CASE(a_malformed_file_fails_closed),
		CASE(a_link_or_fifo_in_place_of_the_file_fails_closed_without_hanging),
	};

	if (argc == 3 && strcmp(argv[1], "alloc") == 0)
		return alloc_worker(argv[2]);
	return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
