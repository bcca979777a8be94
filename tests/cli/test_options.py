"""Each option declared once: generate, trace run and sweep-k --measure take their flags from the
declarations, and a flag means the same in each."""

import inspect

from specd.cli.generate import generate
from specd.cli.options import RunArgs
from specd.cli.sweep_k import MODEL_OPTIONS, sweep_k
from specd.cli.trace import app as trace_app
from specd.models.run.option_spec import specs
from specd.models.run.options import GenerateOptions
from tests.helpers import run_cli


def names(command) -> list[str]:
    return [p for p in inspect.signature(command).parameters if p != "ctx"]


def declared(param) -> tuple:
    """(flags, help, default) of a Typer parameter built from a declaration."""
    info = param.annotation.__metadata__[0]
    return (info.default, *info.param_decls), info.help, param.default


def trace_run():
    return next(c.callback for c in trace_app.registered_commands if c.name == "run")


def test_generate_takes_every_declared_option_and_run_argument_once():
    assert names(generate) == [*specs(GenerateOptions), *specs(RunArgs)]


def test_trace_run_is_generate_without_the_target_only_modes():
    assert names(trace_run()) == [n for n in names(generate) if n not in ("baseline", "compare")]
    for name in names(trace_run()):  # same flags, same help, same default
        mine = inspect.signature(trace_run()).parameters[name]
        theirs = inspect.signature(generate).parameters[name]
        assert declared(mine) == declared(theirs), name


def test_sweep_k_measure_takes_the_model_options_from_the_same_declarations():
    params = inspect.signature(sweep_k).parameters
    for name in MODEL_OPTIONS:
        flags, _, _ = declared(params[name])
        assert flags == specs(GenerateOptions)[name][0].flags, name
    assert params["max_new_tokens"].default == 32  # its own default, the declaration's flag


def test_trace_run_without_an_acceptance_log_is_refused(capsys):
    code, out, err = run_cli(["trace", "run", "-p", "hi"], capsys)
    assert code == 2 and err.count("\n") == 1 and "trace run needs --trace FILE" in err
