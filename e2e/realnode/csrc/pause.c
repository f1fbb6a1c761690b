/* The sandbox ("pause") process of the real-node tier: sleeps until SIGTERM/SIGINT and reaps
 * children. Linked statically, so its image layer holds this one file. */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int signum) {
    (void)signum;
    _exit(0);
}

static void on_child(int signum) {
    (void)signum;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction term = {.sa_handler = on_term};
    struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    sigaction(SIGTERM, &term, NULL);
    sigaction(SIGINT, &term, NULL);
    sigaction(SIGCHLD, &child, NULL);
    for (;;) {
        pause();
    }
}
