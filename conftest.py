# The project's own tests drive the plugin end to end through pytester.
pytest_plugins = ["pytester"]
