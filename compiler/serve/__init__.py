"""``mvflow serve``: runners that refresh a project forever and share its models (seed 000's
distributed scheduler).

Seed 000 → mvflow:

- ``mv_runners`` → the state store's runners table: each ``serve`` process registers and beats a
  heartbeat (``runner.RunnerProcess``);
- ``MvCoordinator``, elected "through CoordinationService" → ``coordinator.Coordinator``: the
  runner holding the ``serve:coordinator`` lease (a fencing token like any topic's);
- ``mv_commands`` START/STOP + ``mv_runner_jobs`` → the assignments table, written only by the
  coordinator and fenced by its token; a runner reads its assignments on every turn, so a job
  handed away stops being started there, and a job handed here waits until its old runner's step
  ends (the topics' leases), rather than a START/STOP command queue to replay;
- ``mv_handlers`` (what should run) → the project's selected models (``runner.job_order``).

Pure decisions live apart: ``assign.balance`` (who runs what) and ``schedule`` (which jobs start now).
"""
