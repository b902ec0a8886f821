"""Code that runs in a task's process on a worker: the epoch's side of a checkpointed task
(its begin, restore and acknowledgement), the fault drills a run may switch on, and what a
worker imports once before its tasks (``preload``). Nothing here runs in the api-server,
the scheduler or the triggerer."""
