/* Logging: one line per message, straight to stderr (no stdio buffering, safe after fork). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "vgpu.h"

int vgpu_log_level = VGPU_LOG_WARN;

void vgpu_log(int level, const char *fmt, ...)
{
	static const char *const names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
	char buf[1024];
	va_list ap;
	int n;

	n = snprintf(buf, sizeof(buf), "libvgpu[%d] %s: ", (int)getpid(), names[level & 3]);
	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	strcat(buf, "\n");
	if (write(STDERR_FILENO, buf, strlen(buf)) < 0) {
		/* nowhere left to report it */
	}
}
