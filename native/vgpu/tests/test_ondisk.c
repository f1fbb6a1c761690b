/* This libvgpu over what an earlier release left on a node (tests/fixtures/ondisk/<commit>/,
 * written by that release's own agent and libvgpu: scripts/ondisk_fixtures.py). A container
 * started after an upgrade shares its claim's region with containers of the release before, and
 * reads the limits file and priority boards that release wrote: all are taken as written. A
 * file of a version this library does not know (a newer release's, after a downgrade) fails
 * closed, naming the file, as every unusable limits file or region does.
 * Run with ONDISK_FIXTURE=<the release's fixture dir>, TEST_TMP and, as the release's CDI spec
 * sets them for its claim, CUDA_TASK_PRIORITY=0 CUDA_TASK_PRIORITY_DIR=/usr/local/vgpu/priority
 * (the environment may only lower the file's priority); as root (the limits file lives at
 * its compiled-in path in a private mount namespace: tests/limits_ns.h). */
#include <errno.h>
#include <glob.h>
#include <sys/mman.h>

#include "limits_ns.h"
#include "region.h"

#define CONTAINER_VGPU "/usr/local/vgpu" /* what the CDI spec mounts; the limits file names it */
#define REGION CONTAINER_VGPU "/shared/vgpu.cache"
#define BOARDS CONTAINER_VGPU "/priority"

/* The fixture's claim with a region: "<fixture>/node/vgpu/claims/<uid>" (its uid also names the
 * limits file). */
static const char *claim_dir(void)
{
	static char dir[1024];
	char pattern[900];
	glob_t found;

	if (dir[0])
		return dir;
	snprintf(pattern, sizeof(pattern), "%s/node/vgpu/claims/*/vgpu.cache",
		 getenv("ONDISK_FIXTURE") ? getenv("ONDISK_FIXTURE") : "/nonexistent");
	if (glob(pattern, 0, NULL, &found) == 0 && found.gl_pathc == 1) {
		snprintf(dir, sizeof(dir), "%s", found.gl_pathv[0]);
		*strrchr(dir, '/') = '\0';
	}
	globfree(&found);
	return dir;
}

static size_t read_file(const char *path, char *buf, size_t size)
{
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, size - 1, f) : 0;

	if (f)
		fclose(f);
	buf[n] = '\0';
	return n;
}

/* The release's limits file for the region's claim, as text. */
static const char *fixture_limits(void)
{
	static char text[4097];
	char path[1400];
	const char *uid = strrchr(claim_dir(), '/');

	snprintf(path, sizeof(path), "%s/node/vgpu/limits/%s.conf", getenv("ONDISK_FIXTURE"),
		 uid ? uid + 1 : "none");
	CHECK(read_file(path, text, sizeof(text)) > 0);
	return text;
}

static int copy_file(const char *from, const char *to, mode_t mode)
{
	static char data[256 * 1024];
	FILE *in = fopen(from, "r");
	size_t n = in ? fread(data, 1, sizeof(data), in) : 0;
	int fd = open(to, O_WRONLY | O_CREAT | O_EXCL, mode);

	if (in)
		fclose(in);
	if (n == 0 || fd < 0 || write(fd, data, n) != (ssize_t)n || fchmod(fd, mode) < 0) {
		perror(to);
		return -1;
	}
	return close(fd);
}

/* In the container's namespace (after limits_ns_enter): the claim's mounts at the spec's paths,
 * a tmpfs holding a copy of the release's region and the node's boards. */
static int mount_claim(void)
{
	char from[1400], to[512], board[1400];
	const char *top = access(CONTAINER_VGPU, F_OK) == 0 ? CONTAINER_VGPU : "/usr/local";
	glob_t boards;
	int rc = 0;

	if (mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m") < 0 ||
	    (mkdir(CONTAINER_VGPU, 0755) < 0 && errno != EEXIST) ||
	    mkdir(CONTAINER_VGPU "/shared", 0777) < 0 || mkdir(BOARDS, 01777) < 0) {
		perror("    tmpfs for " CONTAINER_VGPU);
		return -1;
	}
	snprintf(from, sizeof(from), "%s/vgpu.cache", claim_dir());
	rc |= copy_file(from, REGION, 0666);
	snprintf(board, sizeof(board), "%s/node/vgpu/priority/*.board", getenv("ONDISK_FIXTURE"));
	if (glob(board, 0, NULL, &boards) != 0 || boards.gl_pathc == 0)
		return -1;
	for (size_t i = 0; i < boards.gl_pathc; i++) {
		snprintf(to, sizeof(to), BOARDS "%s", strrchr(boards.gl_pathv[i], '/'));
		rc |= copy_file(boards.gl_pathv[i], to, 0666);
	}
	globfree(&boards);
	return rc;
}

/* Runs `fn` in a child in a container of the release's claim: its limits file (`limits`, the
 * release's unless changed), its region and boards at the spec's paths (after `edit_region`,
 * if any, changed the region). */
static void in_the_claims_container(const char *limits, void (*edit_region)(void), void (*fn)(void))
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		if (limits_ns_enter() < 0 || put_limits_file(limits) < 0 || mount_claim() < 0)
			_exit(2);
		if (edit_region)
			edit_region();
		check_case_failed = 0;
		fn();
		_exit(check_case_failed ? 1 : 0);
	}
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static struct vgpu_region *map_region(void)
{
	int fd = open(REGION, O_RDWR);
	void *p = fd < 0 ? MAP_FAILED
			 : mmap(NULL, sizeof(struct vgpu_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (fd >= 0)
		close(fd);
	CHECK(p != MAP_FAILED);
	return p == MAP_FAILED ? NULL : p;
}

/* Bytes charged on device `d` over the live slots (what libvgpu counts as the container's). */
static uint64_t used_on(const struct vgpu_region *r, int d)
{
	uint64_t used = 0;

	for (uint32_t s = 0; r && s < r->high_water && s < VGPU_REGION_SLOTS; s++)
		if (r->slots[s].pid != 0)
			used += r->slots[s].used[d];
	return used;
}

static uint64_t board_stamp(const char *uuid)
{
	char path[256];
	uint64_t words[9] = {0};
	int fd;

	snprintf(path, sizeof(path), BOARDS "/%s.board", uuid);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0 && pread(fd, words, sizeof(words), 0) == (ssize_t)sizeof(words));
	if (fd >= 0)
		close(fd);
	return words[8]; /* high_ns, at offset 64 */
}

/* The release's claim: one card, 3000 MiB and 30% SM, priority 0; its region holds that card
 * and the one allocation refused over the limit. */
#define CARD "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae00"

static void takes_the_claim_as_written(void)
{
	struct vgpu_region *r = map_region();
	uint64_t stamp = board_stamp(CARD);
	CUdeviceptr p;

	CHECK(r != NULL && r->magic == VGPU_REGION_MAGIC && r->version == VGPU_REGION_VERSION);
	CHECK(r && r->ndev == 1 && strcmp(r->devices[0].uuid, CARD) == 0);
	CHECK(r && r->devices[0].refused == 1);
	CHECK(ctx_on(0) == 0);
	CHECK_EQ(total_mem(), 3000 * MiB);
	CHECK_EQ(cuMemAlloc_v2(&p, 2900 * MiB), CUDA_SUCCESS);
	CHECK_EQ(cuMemAlloc_v2(&p, 200 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(launch_kind("kernel", NULL), CUDA_SUCCESS);
	/* the same device entry, its limits as the release's library wrote them, one refusal more */
	CHECK(r && r->ndev == 1 && r->devices[0].mem_limit == 3000 * MiB);
	CHECK(r && r->devices[0].sm_limit == 30 && r->devices[0].refused == 2);
	CHECK(r && used_on(r, 0) == 2900 * MiB);
	/* a priority-0 launch stamps the release's board: it was taken as a board, not left alone */
	CHECK(board_stamp(CARD) != stamp);
}

static void the_releases_limits_file_region_and_board_are_taken_as_written(void)
{
	in_the_claims_container(fixture_limits(), NULL, takes_the_claim_as_written);
}

static const char *err_file(const char *name)
{
	static char path[512];

	snprintf(path, sizeof(path), "%s/ondisk-%s.%d.err",
		 getenv("TEST_TMP") ? getenv("TEST_TMP") : "/tmp", name, (int)getpid());
	return path;
}

static int file_has(const char *path, const char *needle)
{
	static char text[8192];

	read_file(path, text, sizeof(text));
	return strstr(text, needle) != NULL;
}

/* A newer release's region: the next version, of the same size or larger. */
static void next_version_same_size(void)
{
	struct vgpu_region *r = map_region();

	if (r)
		r->version = VGPU_REGION_VERSION + 1;
}

static void next_version_larger(void)
{
	struct vgpu_region *r = map_region();

	if (r) {
		r->version = VGPU_REGION_VERSION + 1;
		r->size = sizeof(*r) + 4096;
	}
	CHECK(truncate(REGION, sizeof(*r) + 4096) == 0);
}

static void refused_naming(const char *what, const char *needle)
{
	const char *err = err_file(what);

	CHECK_EQ(run_alloc_worker(MiB, NULL, err), ALLOC_NOT_PERMITTED);
	CHECK(file_has(err, needle));
	CHECK(file_has(err, "fail closed"));
}

static void refused_naming_the_region(void)
{
	refused_naming("region", "shared region " REGION " is version 3");
}

static void a_region_of_a_newer_version_fails_closed(void)
{
	in_the_claims_container(fixture_limits(), next_version_same_size, refused_naming_the_region);
	in_the_claims_container(fixture_limits(), next_version_larger, refused_naming_the_region);
}

static void refused_naming_the_limits_file(void)
{
	refused_naming("limits", VGPU_LIMITS_FILE);
}

static void a_limits_file_of_a_newer_version_fails_closed(void)
{
	static char newer[4200];
	const char *text = fixture_limits(), *rest = strchr(text, '\n');

	CHECK(strncmp(text, "vgpu-bridge-limits 2\n", 21) == 0 && rest != NULL);
	snprintf(newer, sizeof(newer), "vgpu-bridge-limits 3%s", rest ? rest : "");
	in_the_claims_container(newer, NULL, refused_naming_the_limits_file);
}

int main(int argc, char **argv)
{
	static const struct check_case cases[] = {
		CASE(the_releases_limits_file_region_and_board_are_taken_as_written),
		CASE(a_region_of_a_newer_version_fails_closed),
		CASE(a_limits_file_of_a_newer_version_fails_closed),
	};

	if (argc == 3 && strcmp(argv[1], "alloc") == 0)
		return alloc_worker(argv[2]);
	if (claim_dir()[0] == '\0') {
		fprintf(stderr, "ONDISK_FIXTURE: no <dir>/node/vgpu/claims/*/vgpu.cache\n");
		return 2;
	}
	return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
