// core/rank_guard.h: name the rank when a rank's process is killed.
//
// A process killed by SIGKILL (the OOM killer, a scheduler, `kill -9`) can print nothing,
// and MPICH's launcher then reports only "BAD TERMINATION" with a pid that races with its
// own clean-up. So under a launcher (PMI_RANK, PMIX_RANK or SLURM_PROCID set) each rank
// runs as the child of a small guard process: the guard waits, and if the rank dies from a
// signal it prints "[rank R] megac: rank process P killed by signal S (NAME)" and exits
// with 128 + S, which ends the job. The rank dies with its guard (PR_SET_PDEATHSIG), so a
// cleaned-up job leaves nothing behind. A rank that died of SIGABRT (how MPI libraries end a
// rank whose peer vanished) is reported 2 s late, so that the rank that was killed first is
// the one named. MEGAC_NO_GUARD=1 turns it off.
#pragma once

// Call first in main(). Returns in the rank process (at once when not under a launcher or
// when already guarded); in the guard it does not return. Never fails: if the guard cannot
// be set up, the program simply runs unguarded.
void core_rank_guard(int argc, char **argv);
