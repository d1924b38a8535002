"""Tests for tfdist.cluster.liveness.lost_peer: TensorFlow's words for a lost peer (as TF 2.21
raised them in rehearsals whose link to a pod was cut) as one line naming the peer."""

from absl.testing import absltest

from tfdist import strategies
from tfdist.errors import LostPeer
from tfdist.cluster import liveness

# What worker 0 of two raised when worker 1's link went down, and what worker 1 raised.
_UNHEALTHY = (
    "Collective ops is aborted by: Error reported from /job:worker/task:1: The "
    "following tasks are unhealthy (stopped sending heartbeats):\n"
    "/job:worker/replica:0/task:1\nThe tasks have crashed. Check the task logs for an "
    "earlier error, or scheduler events (e.g. preemption, eviction) to debug further."
)
_NO_LEADER = (
    "Collective ops is aborted by: Deadline Exceeded\n\n"
    "RPC: /tensorflow.CoordinationService/Heartbeat\nThe error could be from a "
    "previous operation. Restart your program to reset."
)

# What the cut-off worker of two raised when its collective outlived --collective_timeout_s.
_TIMED_OUT = (
    "Graph execution error:\n\nDetected at node CollectiveReduceV2 defined at (most "
    'recent call last):\n  File "train.py", line 6, in <module>\n\nCollective has '
    "timed out during execution.\n\t [[{{node CollectiveReduceV2}}]] "
    "[Op:__inference_train_function_2155]"
)

# What the survivor of a SIGKILLed peer raised in a JobSet rehearsal: a heading, then the words.
_KILLED_PEER = (
    "Graph execution error:\n\nDetected at node CollectiveReduceV2 defined at (most "
    "recent call last):\nCollective ops is aborted by: failed to connect to all addresses; "
    "last error: UNKNOWN: ipv4:10.0.0.3:2222: Connection refused\nAdditional GRPC error "
    "information from remote target /job:worker/replica:0/task:1"
)


# What worker 0 of three raised on real Slurm (slurm-wlm 22.05, TF 2.21) when worker 1 was
# SIGKILLed mid-epoch: worker 1's connection reset, and worker 2, alive, answering with the
# collective it had aborted for the same reason.
_RELAYED = (
    "Collective ops is aborted by: Collective ops is aborted by: recvmsg:Connection reset by "
    "peer\nAdditional GRPC error information from remote target /job:worker/replica:0/task:1 "
    "while calling /tensorflow.WorkerService/RecvBuf:\n:UNKNOWN:Error received from peer  "
    '{grpc_message:"recvmsg:Connection reset by peer", grpc_status:14}\nThe error could be '
    "from a previous operation. Restart your program to reset.\nAdditional GRPC error "
    "information from remote target /job:worker/replica:0/task:2 while calling "
    "/tensorflow.WorkerService/RecvBuf:\n:UNKNOWN:Error received from peer  {grpc_status:14, "
    'grpc_message:"Collective ops is aborted by: recvmsg:Connection reset by peer\\nAdditional '
    "GRPC error information from remote target /job:worker/replica:0/task:1 while calling "
    "/tensorflow.WorkerService/RecvBuf:\\n:UNKNOWN:Error received from peer  "
    '{grpc_message:\\"recvmsg:Connection reset by peer\\", grpc_status:14}\\nThe error could '
    'be from a previous operation. Restart your program to reset."}\nThe error could be from a '
    "previous operation. Restart your program to reset.\n\t [[{{node CollectiveReduceV2}}]] "
    "[Op:__inference_train_function_1865]"
)
# What worker 1 of three raised there when worker 2 was killed and worker 0, which holds the
# coordination service, had already ended on its own error.
_LEADER_GONE = (
    "Collective ops is aborted by: Failed to send RPC to coordination service. Either the "
    "leader task was preempted/died/restarted unexpectedly or this task is experiencing network "
    "issues.\nAdditional GRPC error information from remote target /job:worker/replica:0/task:0 "
    "while calling /tensorflow.CoordinationService/Heartbeat:\n:UNKNOWN:Error received from "
    'peer  {grpc_status:14, grpc_message:"failed to connect to all addresses; last error: '
    'UNKNOWN: ipv4:10.250.0.3:8888: Failed to connect to remote host: Connection refused"}'
)


def _three(index: int):
    return strategies.make_cluster(
        num_workers=3, ports=[2222, 2223, 2224], host="pod", task=("worker", index)
    )


def _cluster(index: int, chief: bool = False):
    return strategies.make_cluster(
        num_workers=2,
        chief=chief,
        ports=[2222, 2223, 2224][: 2 + chief],
        host="pod",
        task=("worker", index),
    )


class LostPeerTest(absltest.TestCase):
    def test_the_survivor_names_the_peer_that_stopped_sending_heartbeats(self):
        lost = liveness.lost_peer(_UNHEALTHY, _cluster(0))
        self.assertIsInstance(lost, LostPeer)
        self.assertEqual(
            str(lost).split(";")[0], "lost peer worker:1 at pod:2223: it stopped sending heartbeats"
        )
        self.assertNotIn("\n", str(lost))
        self.assertIn("--model_dir's backup", str(lost))

    def test_the_cut_off_task_names_the_coordination_service_it_lost(self):
        self.assertEqual(
            str(liveness.lost_peer(_NO_LEADER, _cluster(1))).split(";")[0],
            "lost peer worker:0 at pod:2222: it holds the coordination service, "
            "and it stopped answering heartbeats",
        )
        with_chief = liveness.lost_peer(_NO_LEADER, _cluster(1, chief=True))
        self.assertIn("lost peer chief:0 at pod:2222", str(with_chief))

    def test_the_cause_is_tensorflows_words_not_their_heading(self):
        line = str(liveness.lost_peer(_KILLED_PEER, _cluster(0)))
        self.assertIn("lost peer worker:1 at pod:2223: TensorFlow: Collective ops is aborted", line)
        self.assertIn("Connection refused", line)
        self.assertNotIn("Graph execution error", line)

    def test_a_peer_that_answered_with_its_own_aborted_collective_is_not_named_lost(self):
        self.assertEqual(
            str(liveness.lost_peer(_RELAYED, _three(0))).split(";")[0],
            "lost peer worker:1 at pod:2223: TensorFlow: Collective ops is aborted by: "
            "Collective ops is aborted by: recvmsg:Connection reset by peer",
        )
        self.assertIn(
            "lost peer worker:0 at pod:2222: ", str(liveness.lost_peer(_LEADER_GONE, _three(1)))
        )

    def test_a_loss_only_passed_on_names_who_passed_it_on(self):
        passed_on = (
            "Collective ops is aborted by: Collective ops is aborted by: peer lost\nAdditional "
            "GRPC error information from remote target /job:worker/replica:0/task:2 while calling "
            "/tensorflow.WorkerService/RecvBuf:\n:UNKNOWN:Error received from peer  "
            '{grpc_status:14, grpc_message:"Collective ops is aborted by: peer lost"}'
        )
        self.assertEqual(
            str(liveness.lost_peer(passed_on, _three(0))).split(";")[0],
            "lost a peer, as worker:2 at pod:2224 said (Collective ops is aborted by: Collective "
            "ops is aborted by: peer lost)",
        )

    def test_the_restart_advice_is_what_each_engine_runs_again(self):
        line = str(liveness.lost_peer(_UNHEALTHY, _cluster(0)))
        # Slurm's --requeue never requeues a failed job; scontrol requeue does.
        self.assertIn("on Slurm `scontrol requeue JOBID` within MinJobAge", line)
        self.assertNotIn("sbatch --requeue", line)
        self.assertIn("`tfdist launch` or `tfdist ray` with --max_restarts", line)
        self.assertIn("failurePolicy.maxRestarts", line)

    def test_other_errors_are_not_a_lost_peer(self):
        self.assertIsNone(liveness.lost_peer("Incompatible shapes: [2] vs. [3]", _cluster(0)))
        self.assertIsNone(liveness.lost_peer(_UNHEALTHY, None))

    def test_a_peer_error_without_a_task_still_reads_as_one_line(self):
        lost = liveness.lost_peer("failed to connect to all addresses\nmore", _cluster(0))
        self.assertTrue(str(lost).startswith("lost a peer (failed to connect to all addresses)"))

    def test_a_timed_out_collective_names_the_one_other_task_of_the_group(self):
        self.assertEqual(
            str(liveness.lost_peer(_TIMED_OUT, _cluster(1))).split(";")[0],
            "lost peer worker:0 at pod:2222: a collective waited for it longer "
            "than --collective_timeout_s",
        )
        # With a chief there are two others: which one stalled is not known.
        lost = str(liveness.lost_peer(_TIMED_OUT, _cluster(1, chief=True)))
        self.assertTrue(
            lost.startswith("lost a peer (Collective has timed out during execution.); every task"),
            lost,
        )
        self.assertNotIn("\n", lost)

    def test_a_thousand_lost_peers_are_named_up_to_a_few(self):
        cluster = strategies.make_cluster(
            num_workers=1000, ports=list(range(2000, 3000)), host="pod", task=("worker", 0)
        )
        message = "The following tasks are unhealthy (stopped sending heartbeats):\n" + "\n".join(
            f"/job:worker/replica:0/task:{index}" for index in range(1, 1000)
        )
        lost = str(liveness.lost_peer(message, cluster))
        self.assertTrue(lost.startswith("lost peers worker:1 at pod:2001, "), lost[:200])
        self.assertIn("worker:5 at pod:2005 and 994 more: it stopped sending heartbeats", lost)
        self.assertLess(len(lost), 600)
        self.assertNotIn("\n", lost)


if __name__ == "__main__":
    absltest.main()
