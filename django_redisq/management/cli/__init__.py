"""The command lines' parts: one module per ``manage.py redisq`` subcommand family, and what the commands share.

``args.py`` (option types, one-line usage errors), ``out.py`` (exit codes,
tables, ``--json``, errors as one line) and ``text.py`` (what is printed of
Redis's strings, escaped) serve both ``redisq`` and ``runworker``. They live
outside ``commands/`` because Django takes every module there for a command.
"""
