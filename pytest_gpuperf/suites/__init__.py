"""The shipped perf suites (training, inference, micro, distributed), a package so that the wheel carries them.

Run them from a checkout with ``pytest -m perf``, from an installed package with
``pytest --pyargs pytest_gpuperf.suites`` or ``gpuperf run`` (docs/installing.md). Their tests are keyed in the
baseline store and the results by ``pytest_gpuperf/suites/<module>.py::<test>`` wherever the package is installed
(``pytest_gpuperf.core.store.testid``). Nothing here is imported by the plugin.
"""
