/*
 * The limits file: the claim's limits as the node agent wrote them, mounted read-only into the
 * container at VGPU_LIMITS_FILE (compiled in: a path from the environment would let a process
 * name a file of its own). When it is there it is the ceiling, and the environment may only
 * lower a limit, or make the priority lower (a larger number). Version 1:
 *     vgpu-bridge-limits 1
 *     KEY=VALUE                  one per line, the environment's names and value syntax:
 *     CUDA_DEVICE_MEMORY_LIMIT[_<i>], CUDA_DEVICE_SM_LIMIT[_<i>], CUDA_TASK_PRIORITY,
 *     CUDA_DEVICE_MEMORY_SHARED_CACHE (the claim's region: the environment's is then ignored)
 * At most 4096 bytes; blank lines allowed. Absent (ENOENT, ENOTDIR): the environment alone.
 * Anything else (a link, a FIFO, unreadable, too long, another header, an unknown or repeated
 * key, a bad value): fail closed, naming the file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vgpu.h"

#define LIMITS_MAX_BYTES 4096
#define LIMITS_MAX_SETTINGS 256
#define LIMITS_HEADER "vgpu-bridge-limits 1"

static int file_fail(struct vgpu_config *cfg, const char *path, int line, const char *why)
{
	if (!cfg->failed && line > 0)
		snprintf(cfg->error, sizeof(cfg->error), "%.200s line %d: %.290s", path, line, why);
	else if (!cfg->failed)
		snprintf(cfg->error, sizeof(cfg->error), "%.200s: %.300s", path, why);
	cfg->failed = true;
	return -1;
}

/* 0: absent; 1: read into buf (NUL-terminated, *len bytes); -1: there but unusable (*why). */
static int read_limits(const char *path, char *buf, size_t *len, const char **why)
{
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

	*len = 0;
	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		*why = errno == ELOOP ? "is a symbolic link" : "cannot be opened";
		return -1;
	}
	*why = fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ? "is not a regular file" : NULL;
	while (*why == NULL && *len <= LIMITS_MAX_BYTES) {
		n = read(fd, buf + *len, LIMITS_MAX_BYTES + 1 - *len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			*why = n < 0 ? "cannot be read" : NULL;
			break;
		}
		*len += (size_t)n;
	}
	close(fd);
	if (*why == NULL && *len > LIMITS_MAX_BYTES)
		*why = "is larger than 4096 bytes";
	buf[*len] = '\0';
	return *why ? -1 : 1;
}

/* Length of the key of a KEY=VALUE setting, or 0 when it is not one the file may set. */
static size_t known_key(const char *setting)
{
	static const char *const keys[] = {"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT",
					   "CUDA_TASK_PRIORITY", "CUDA_DEVICE_MEMORY_SHARED_CACHE"};
	size_t klen = strcspn(setting, "=");

	if (setting[klen] != '=')
		return 0;
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		size_t n = strlen(keys[k]);
		if (strncmp(setting, keys[k], n) != 0)
			continue;
		if (klen == n || (k < 2 && klen > n && setting[n] == '_')) /* per device: limits only */
			return klen;
	}
	return 0;
}

static bool repeated(char *const *settings, int n, const char *setting, size_t klen)
{
	for (int i = 0; i < n; i++)
		if (strncmp(settings[i], setting, klen + 1) == 0)
			return true;
	return false;
}

/* Splits the text into NULL-terminated KEY=VALUE settings, in place. 0, or the faulty line. */
static int split_settings(char *text, size_t len, char **settings, const char **why)
{
	char *line = text, *next;
	int n = 0;

	if (strlen(text) != len) {
		*why = "contains a NUL byte";
		return 1;
	}
	for (int lineno = 1; line != NULL; lineno++, line = next) {
		size_t klen;
		if ((next = strchr(line, '\n')) != NULL)
			*next++ = '\0';
		if (lineno == 1 && strcmp(line, LIMITS_HEADER) != 0)
			*why = "the first line is not \"" LIMITS_HEADER "\"";
		else if (lineno == 1 || *line == '\0')
			continue;
		else if ((klen = known_key(line)) == 0)
			*why = "not a KEY=VALUE line with a limit's name";
		else if (repeated(settings, n, line, klen))
			*why = "the key is set twice";
		else if (n == LIMITS_MAX_SETTINGS)
			*why = "too many settings";
		else
			settings[n++] = line;
		if (*why)
			return lineno;
	}
	settings[n] = NULL;
	return 0;
}

/* The tighter of two limits where 0 means none. */
static uint64_t tighter(uint64_t a, uint64_t b)
{
	return a == 0 ? b : b == 0 || a < b ? a : b;
}

/* The environment's values in cfg, capped by the file's; one warning per kind it tried to raise. */
static void cap_by_file(struct vgpu_config *cfg, const struct vgpu_config *file, bool file_region,
			const char *path)
{
	int mem_raised = -1, sm_raised = -1;

	for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
		if (cfg->mem_limit[i] != tighter(cfg->mem_limit[i], file->mem_limit[i]) && mem_raised < 0)
			mem_raised = cfg->mem_limit[i] ? i : mem_raised;
		if (cfg->sm_limit[i] != tighter(cfg->sm_limit[i], file->sm_limit[i]) && sm_raised < 0)
			sm_raised = cfg->sm_limit[i] ? i : sm_raised;
		cfg->mem_limit[i] = tighter(cfg->mem_limit[i], file->mem_limit[i]);
		cfg->sm_limit[i] = (unsigned int)tighter(cfg->sm_limit[i], file->sm_limit[i]);
	}
	if (mem_raised >= 0 || sm_raised >= 0 || cfg->priority < file->priority)
		fprintf(stderr, "libvgpu: the environment asks for more than %s allows (%s%s%s%s%s); "
				"the file's values apply\n", path, mem_raised >= 0 ? "memory" : "",
			mem_raised >= 0 && sm_raised >= 0 ? ", " : "", sm_raised >= 0 ? "SM" : "",
			(mem_raised >= 0 || sm_raised >= 0) && cfg->priority < file->priority ? ", " : "",
			cfg->priority < file->priority ? "priority" : "");
	if (cfg->priority < file->priority)
		cfg->priority = file->priority;
	if (file_region)
		memcpy(cfg->shared_cache, file->shared_cache, sizeof(cfg->shared_cache));
}

int vgpu_config_load(struct vgpu_config *cfg, char *const *envp, const char *path)
{
	char text[LIMITS_MAX_BYTES + 2], *settings[LIMITS_MAX_SETTINGS + 1];
	struct vgpu_config file;
	const char *why = NULL;
	size_t len;
	int rc = vgpu_config_parse(cfg, envp), read, line;

	if ((read = read_limits(path, text, &len, &why)) == 0)
		return rc;
	if (read < 0)
		return file_fail(cfg, path, 0, why);
	if ((line = split_settings(text, len, settings, &why)) != 0)
		return file_fail(cfg, path, line, why);
	if (vgpu_config_parse_limits(&file, settings) < 0)
		return file_fail(cfg, path, 0, file.error);
	bool file_region = false;
	for (char **s = settings; *s; s++)
		file_region |= strncmp(*s, "CUDA_DEVICE_MEMORY_SHARED_CACHE=", 32) == 0;
	cap_by_file(cfg, &file, file_region, path);
	vgpu_config_settle(cfg);
	cfg->limits_file = true;
	return rc;
}
