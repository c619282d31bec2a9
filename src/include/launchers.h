/* Launch threads (src/core/launchers.c): a group that launches on several
 * devices runs each device's launches on that device's thread. */
#ifndef ANYCCL_LAUNCHERS_H
#define ANYCCL_LAUNCHERS_H

struct anycclLaunchJob {
  int dev;                                                /* the device whose thread runs it */
  void (*fn)(struct anycclLaunchJob* job, int* curDev); /* *curDev: the running thread's current device */
  int done;                                               /* set by a launch thread when it has run it */
};

/* ANYCCL_LAUNCH_THREADS (default on). */
int anycclLaunchThreadsOn(void);
/* Run jobs[0] on the calling thread (whose current device is *curDev) and
 * jobs[1..n-1] on their devices' launch threads, at most one job per device;
 * returns once every job has run. */
void anycclLaunchRun(struct anycclLaunchJob** jobs, int n, int* curDev);

#endif
