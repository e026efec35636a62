from django_redisq.compat import TaskResultStatus
from tests.testapp import tasks


def test_enqueue_run_result(r, make_worker):
    result = tasks.add.delay(2, 3)
    assert result.status == TaskResultStatus.READY
    assert make_worker().run() == 1
    again = tasks.add.get_result(result.id)
    assert again.status == TaskResultStatus.SUCCESSFUL
    assert again.return_value == 5
