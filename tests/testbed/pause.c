/* Pod sandbox process for the test bed's pause image: holds the pod's namespaces open, reaps any
 * child that gets reparented to it, and exits 0 on SIGINT or SIGTERM so StopPodSandbox is quick.
 * Built static by images.py (gcc -static), so the image needs no libc. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void terminate(int signo) {
    (void)signo;
    _exit(0);
}

static void reap_children(int signo) {
    (void)signo;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction stop = {.sa_handler = terminate};
    struct sigaction child = {.sa_handler = reap_children, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    sigaction(SIGINT, &stop, NULL);
    sigaction(SIGTERM, &stop, NULL);
    sigaction(SIGCHLD, &child, NULL);
    for (;;) {
        pause();
    }
}
