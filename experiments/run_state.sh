# Sourced by the experiment scripts (bash): what state a run directory is in.
#
# finished RUN_DIR: exit 0 if RUN_DIR holds a finished run, a metrics.json that a stop signal
# did not write (selfcaps.cli.rundir.run_finished). A run SIGTERM or Ctrl-C stopped also has a
# metrics.json, marked stopped_by: signal; `selfcaps run METHOD --out RUN_DIR --resume ...`
# continues it from its last checkpoint, and starts the run from the command line when RUN_DIR
# holds no run yet, so `finished "$run" || python -m selfcaps run ... --out "$run" --resume`
# both starts and continues.
finished() {
  python -c 'import sys; from selfcaps.cli.rundir import run_finished
sys.exit(0 if run_finished(sys.argv[1]) else 1)' "$1"
}
