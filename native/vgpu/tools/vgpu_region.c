/* vgpu-region FILE: prints a shared region (layout: src/region.h), read-only, for people and
 * scripts: one "region", then "device" and "slot" lines of key value pairs. Exit 1 if the file
 * is not a region this build understands. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "region.h"

int main(int argc, char **argv)
{
	const struct vgpu_region *r;
	struct stat st;
	int fd;

	if (argc != 2) {
		fprintf(stderr, "usage: vgpu-region FILE\n");
		return 2;
	}
	if ((fd = open(argv[1], O_RDONLY)) < 0 || fstat(fd, &st) < 0) {
		perror(argv[1]);
		return 1;
	}
	if (st.st_size != (off_t)sizeof(*r)) {
		uint32_t head[2] = {0, 0};

		if (pread(fd, head, sizeof(head), 0) == (ssize_t)sizeof(head) &&
		    head[0] == VGPU_REGION_MAGIC)
			fprintf(stderr, "%s: a version %u region (%lld bytes); this vgpu-region reads "
				"version %u (%zu bytes)\n", argv[1], head[1], (long long)st.st_size,
				VGPU_REGION_VERSION, sizeof(*r));
		else
			fprintf(stderr, "%s: %lld bytes, version %u is %zu\n", argv[1],
				(long long)st.st_size, VGPU_REGION_VERSION, sizeof(*r));
		close(fd);
		return 1;
	}
	r = mmap(NULL, sizeof(*r), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (r == MAP_FAILED || r->magic != VGPU_REGION_MAGIC || r->version != VGPU_REGION_VERSION) {
		fprintf(stderr, "%s: not a version %u region\n", argv[1], VGPU_REGION_VERSION);
		return 1;
	}
	printf("region %s version %u size %llu devices %u high_water %u\n", argv[1], r->version,
	       (unsigned long long)r->size, r->ndev, r->high_water);
	for (uint32_t d = 0; d < r->ndev && d < VGPU_MAX_DEVICES; d++) {
		unsigned long long used = 0;
		for (uint32_t i = 0; i < r->high_water && i < VGPU_REGION_SLOTS; i++)
			if (r->slots[i].pid)
				used += r->slots[i].used[d];
		printf("device %u uuid %s mem_limit %llu sm_limit %u used %llu\n", d, r->devices[d].uuid,
		       (unsigned long long)r->devices[d].mem_limit, r->devices[d].sm_limit, used);
	}
	for (uint32_t i = 0; i < r->high_water && i < VGPU_REGION_SLOTS; i++) {
		const struct vgpu_region_slot *s = &r->slots[i];
		if (s->pid == 0)
			continue;
		printf("slot %u pid %d host_pid %d priority %d sm_util %u launches %llu", i, s->pid,
		       s->host_pid, s->priority, s->sm_util, (unsigned long long)s->launches);
		for (uint32_t d = 0; d < r->ndev && d < VGPU_MAX_DEVICES; d++)
			printf(" used%u %llu", d, (unsigned long long)s->used[d]);
		printf("\n");
	}
	return 0;
}
