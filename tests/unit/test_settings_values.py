"""Option values click's FLOAT takes but no process can use stop the command at parse
time naming the flag: ``nan``/``inf`` for any float setting, a zero or negative leader
election period, and lease timings out of client-go's order (a ValueError traceback
after the API server was reached)."""

import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.errors import ConfigError
from hami_core.servers.options import SchedulerOptions
from hami_core.servers.scheduler_main import check_lease_timing


@pytest.mark.parametrize(
    ("command", "flag", "value", "says"),
    [
        ("scheduler", "--bind-lock-wait", "nan", "is not a finite number"),
        ("scheduler", "--handshake-period", "inf", "is not a finite number"),
        ("scheduler", "--lease-duration", "-inf", ""),
        ("scheduler", "--retry-period", "0", "is not in the range x>=0.1"),
        ("scheduler", "--lease-duration", "-5", "is not in the range x>=0.1"),
        ("webhook", "--namespace-cache-seconds", "nan", "is not a finite number"),
        ("device-plugin", "--api-timeout", "inf", "is not a finite number"),
    ],
)
def test_unusable_numbers_stop_at_parse_naming_the_flag(command, flag, value, says):
    result = CliRunner().invoke(cli, [command, f"{flag}={value}"])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{flag}'" in result.output
    assert says in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("retry", "renew", "lease"),
    [(2.0, 20.0, 15.0), (5.0, 5.0, 15.0), (2.0, 15.0, 15.0)],
)
def test_lease_timings_out_of_order_are_refused_naming_the_flags(retry, renew, lease):
    opts = SchedulerOptions(retry_period_s=retry, renew_deadline_s=renew, lease_duration_s=lease)
    with pytest.raises(
        ConfigError, match=r"--retry-period .* < --renew-deadline .* < --lease-duration"
    ):
        check_lease_timing(opts)


def test_lease_timings_in_order_or_without_election_pass():
    check_lease_timing(SchedulerOptions())
    check_lease_timing(
        SchedulerOptions(leader_elect=False, retry_period_s=9.0, renew_deadline_s=1.0)
    )
