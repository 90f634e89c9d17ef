"""Rich progress display for a tuning run: task, trials, best GFLOPS, speedup over untuned, ETA."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from autosearch.search.tuner import TuneEvent


class TuningProgress:
    """One overall bar and a status line for the task being tuned. The bar counts trials of the budget; with a
    time limit (``seconds``) and no trial budget it counts the limit's seconds, and the trials are a column; with
    both it shows whichever is nearer its end (the run stops at the first), so the ETA holds on a slow machine too."""

    def __init__(self, console: Console, *, budget: int | None, seconds: float | None = None) -> None:
        self.console = console
        self.budget = budget
        self.seconds = seconds
        self.by_time = budget is None
        if self.by_time and seconds is None:
            raise ValueError("a trial budget or a time limit")
        self.total = seconds if self.by_time else budget
        self._progress = Progress(
            TextColumn("[bold]{task.fields[task_name]}", justify="left"),
            BarColumn(),
            TextColumn("{task.fields[trials]} trials" if self.by_time else "{task.fields[trials]}/" + str(budget)),
            TextColumn("best [cyan]{task.fields[best]}[/cyan] GFLOPS  x{task.fields[speedup]} vs untuned"),
            TextColumn("fail {task.fields[failures]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._bar: Any = None

    def __enter__(self) -> TuningProgress:
        self._progress.__enter__()
        self._bar = self._progress.add_task("tuning", total=self.total, task_name="starting", best="-",
                                            speedup="-", failures=0, trials=0)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.__exit__(*exc)

    def update(self, event: TuneEvent) -> None:
        state = event.task
        name = state.task.name if len(state.task.name) <= 36 else state.task.name[:33] + "..."
        label = f"#{state.task.index} {name}"
        if event.phase == "retime":
            label += " (re-timing finalists)"
        if event.phase == "baseline":
            base = event.batch_results[0]
            label += " (untuned " + (f"{base.median * 1e3:.1f} ms)" if base.ok else f"{base.status.value})")
        if event.phase == "transitions":  # a sub-run after the search, its own trials and clock: the bar stays
            label += " (layout transforms)"
            position = {}
        else:
            position = {"completed": self._completed(event), "trials": event.trials_done}
        self._progress.update(
            self._bar, **position, task_name=label,
            best=f"{state.best_gflops:.1f}" if state.best is not None and state.task.flops else "-",
            speedup=f"{state.speedup:.1f}" if state.speedup else "-",
            failures=sum(1 for r in state.measured.values() if not r.ok),
        )
        if not self.console.is_terminal and event.phase in ("batch", "transitions"):
            done = (f"layout transforms {event.trials_done}/{event.budget}" if event.phase == "transitions"
                    else self._done(event))
            best = (f"{state.best_gflops:.1f} GFLOPS" if state.task.flops  # a layout transform computes nothing
                    else f"{state.best.median * 1e3:.3g} ms" if state.best is not None else "-")
            self.console.print(
                f"[{done}] task #{state.task.index} {state.task.name}: "
                f"{state.trials} trials, best {best} (x{state.speedup:.1f} vs untuned)",
                markup=False,  # "[layout transforms 3/16]" would read as a style tag
            )

    def _completed(self, event: TuneEvent) -> float:
        """The bar's position, in its own unit (seconds of the limit, or trials of the budget)."""
        if self.by_time:
            return min(event.elapsed, self.total)
        if self.seconds is None:
            return event.trials_done
        return min(self.total, max(event.trials_done, self.total * event.elapsed / self.seconds))

    def _done(self, event: TuneEvent) -> str:
        if self.by_time:
            return f"{event.trials_done} trials, {event.elapsed / 60:.1f}/{self.total / 60:g} min"
        if self.seconds is not None:
            return f"{event.trials_done}/{event.budget}, {event.elapsed / 60:.1f}/{self.seconds / 60:g} min"
        return f"{event.trials_done}/{event.budget}"
