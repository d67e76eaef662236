"""What the command line's subcommands run besides ``serve``: ``resolve`` (one span's answer on the terminal) and
``doctor`` (every hop from the application to the flame graph, checked). ``bridge.cli`` parses; these do."""
