"""Replay buffer: FIFO order, batched adds, checkpoints, sampled fields; the expert (s, s') pairs."""

import numpy as np
import torch

from opolo_ros.data.replay import ReplayBuffer


def fill(buf, start, n):
    for k in range(start, start + n):
        buf.add(np.full(2, k), np.full(1, -k), np.full(2, k + 1), k, k % 2, 0)


def test_fifo_wraps_and_batched_add_equals_single_adds():
    a, b = ReplayBuffer(2, 1, 5), ReplayBuffer(2, 1, 5)
    fill(a, 0, 7)
    ks = np.arange(7)
    b.add(np.repeat(ks[:, None], 2, 1), -ks[:, None], np.repeat(ks[:, None] + 1, 2, 1), ks, ks % 2, 0 * ks)
    for buf in (a, b):
        assert len(buf) == 5 and buf.pos == 2 and buf.total_added == 7
        assert sorted(buf.obs[:, 0].tolist()) == [2, 3, 4, 5, 6]
    assert torch.equal(a.obs, b.obs) and torch.equal(a.terminated, b.terminated)


def test_restore_into_larger_and_smaller_capacity_keeps_newest_in_order():
    src = ReplayBuffer(2, 1, 5)
    fill(src, 0, 7)  # holds 2..6, wrapped
    big = ReplayBuffer(2, 1, 10)
    big.load_state_dict(src.state_dict())
    assert big.obs[:5, 0].tolist() == [2, 3, 4, 5, 6] and len(big) == 5 and big.pos == 5
    fill(big, 7, 1)
    assert big.obs[5, 0].item() == 7
    small = ReplayBuffer(2, 1, 3)
    small.load_state_dict(src.state_dict())
    assert small.obs[:, 0].tolist() == [4, 5, 6] and small.pos == 0


def test_same_capacity_restore_samples_identically():
    a = ReplayBuffer(2, 1, 8, seed=3)
    fill(a, 0, 11)
    b = ReplayBuffer(2, 1, 8, seed=99)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.sample(4).obs, b.sample(4).obs)


def test_sample_keeps_each_field_of_a_transition_in_its_place():
    """Every sampled row is one stored transition, field by field (no field swapped or shifted)."""
    buf = ReplayBuffer(2, 3, 8, seed=5)

    def transition(k):  # each field's values name the field and the transition
        return (np.array([100 + k, 150 + k]), np.array([200 + k, 250 + k, 275 + k]),
                np.array([300 + k, 350 + k]), 400 + k, k % 2, k // 2 % 2)

    for k in range(5):  # partly filled: the 3 empty slots (all zeros) must never be drawn
        buf.add(*transition(k))
    got = buf.sample(256)
    ks = (got.obs[:, 0] - 100).long()
    assert set(ks.tolist()) == set(range(5))
    want = [torch.tensor(np.stack([np.asarray(transition(k)[f], np.float32) for k in ks.tolist()]))
            for f in range(6)]
    assert torch.equal(got.obs, want[0]) and torch.equal(got.action, want[1])
    assert torch.equal(got.next_obs, want[2]) and torch.equal(got.reward, want[3])
    assert torch.equal(got.terminated, want[4]) and torch.equal(got.truncated, want[5])
    for k in range(5, 13):  # wrapped: only transitions 5..12 remain
        buf.add(*transition(k))
    assert set((buf.sample(256).obs[:, 0] - 100).long().tolist()) == set(range(5, 13))


def test_expert_dataset_pairs_consecutive_states_within_each_episode():
    """The (s, s') pairs are exactly obs[t], obs[t + 1] of one episode: none across an episode boundary."""
    from opolo_ros.data.demos import Episode, ExpertDataset

    lengths = (3, 5, 2)  # T + 1 states: 2 + 4 + 1 pairs
    episodes = [Episode(np.array([[100 * e + t, -(100 * e + t)] for t in range(n)], np.float32))
                for e, n in enumerate(lengths)]
    ds = ExpertDataset(episodes, obs_dim=2, seed=0)
    want = {((100 * e + t, -(100 * e + t)), (100 * e + t + 1, -(100 * e + t + 1)))
            for e, n in enumerate(lengths) for t in range(n - 1)}
    assert len(ds) == len(want) == 7
    stored = {(tuple(s), tuple(s2)) for s, s2 in zip(ds.obs.tolist(), ds.next_obs.tolist())}
    assert stored == want
    got = ds.sample(512)
    sampled = {(tuple(s), tuple(s2)) for s, s2 in zip(got.obs.tolist(), got.next_obs.tolist())}
    assert sampled == want  # every pair drawn, and nothing else



def test_expert_samples_follow_the_datasets_seed_and_state_not_the_global_rng():
    """The expert pairs a run draws depend on its seed and on the state its checkpoint saves, not on
    what else drew from torch's global generator (network inits, the replay): draws between them
    would change a resumed run's batches (a mutation test: sampling with the global RNG passed)."""
    import torch

    from opolo_ros.data.demos import Episode, ExpertDataset

    episodes = [Episode(np.arange(40, dtype=np.float32).reshape(20, 2))]
    first, second = ExpertDataset(episodes, obs_dim=2, seed=3), ExpertDataset(episodes, obs_dim=2, seed=3)
    torch.manual_seed(0)
    a = first.sample(16).obs
    torch.manual_seed(1)
    torch.rand(7)
    assert torch.equal(second.sample(16).obs, a)
    state = first.state_dict()
    nxt = first.sample(16).obs
    first.load_state_dict(state)
    torch.rand(3)
    assert torch.equal(first.sample(16).obs, nxt)
    assert not torch.equal(ExpertDataset(episodes, obs_dim=2, seed=4).sample(16).obs, a)

def test_an_episode_of_one_state_is_refused(tmp_path):
    """One state holds no (s, s') pair: it loaded, and episodes of one state each ended in a
    cryptic torch.randint error when the expert data was sampled (a mutation test)."""
    import pytest

    from opolo_ros.data.demos import Episode, load_npz

    with pytest.raises(ValueError, match=r"T\+1 >= 2"):
        Episode(np.zeros((1, 3)))
    path = tmp_path / "one.npz"
    np.savez(path, obs_0=np.zeros((1, 3), np.float32))
    with pytest.raises(ValueError, match=r"T\+1 >= 2"):
        load_npz(path)


def test_a_demonstration_file_of_no_episodes_or_non_finite_states_is_refused_in_one_line(tmp_path):
    """`opolo-ros train --demos x.npz` (and `info`) on an .npz that holds no obs_<k> arrays, on a
    single .npy array, on episodes not numbered from 0, on fewer returns than episodes, or on states
    with NaN / inf: a one-line ValueError, not an empty demonstration set, a traceback, or networks
    trained into NaN (a mutation test)."""
    import pytest

    from opolo_ros.data.demos import Episode, load_npz

    empty = tmp_path / "empty.npz"
    np.savez(empty, returns=np.zeros(2))
    with pytest.raises(ValueError, match=r"empty.npz holds no episodes \(no obs_<k> arrays\)"):
        load_npz(empty)
    single = tmp_path / "single.npz"
    with single.open("wb") as f:  # a .npy array under an .npz name
        np.save(f, np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match=r"single.npz is a single .npy array, not an .npz of demonstrations"):
        load_npz(single)
    # numbered from 1, or fewer returns than episodes: a KeyError's or IndexError's traceback before
    gap = tmp_path / "gap.npz"
    np.savez(gap, obs_1=np.zeros((3, 2), np.float32), obs_2=np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match=r"gap.npz: its 2 episodes must be the arrays obs_0 .. obs_1, and "
                                         r"obs_0 is not there \(it holds obs_1, obs_2\)"):
        load_npz(gap)
    short = tmp_path / "short.npz"
    np.savez(short, obs_0=np.zeros((3, 2), np.float32), obs_1=np.ones((3, 2), np.float32), returns=np.ones(1))
    with pytest.raises(ValueError, match=r"short.npz: 'returns' has shape \(1,\), not one value per episode"):
        load_npz(short)
    for bad in (np.nan, np.inf):
        obs = np.zeros((4, 2), np.float32)
        obs[2, 1] = bad
        with pytest.raises(ValueError, match="episode observations contain NaN or inf"):
            Episode(obs)
        path = tmp_path / "bad.npz"
        np.savez(path, obs_0=obs)
        with pytest.raises(ValueError, match="NaN or inf"):
            load_npz(path)


def test_an_npz_without_returns_gives_unknown_returns_not_zero(tmp_path):
    """Demonstrations saved without their returns (a robot's states) have no expert return: NaN,
    which the score and `opolo-ros info` call unknown; 0 would be taken for a known one (a mutation
    test)."""
    from opolo_ros.data.demos import load_npz
    from opolo_ros.train.run_eval import mean_return

    path = tmp_path / "states.npz"
    np.savez(path, obs_0=np.zeros((3, 2), np.float32), obs_1=np.ones((4, 2), np.float32))
    episodes = load_npz(path)
    assert [len(ep.obs) for ep in episodes] == [3, 4]
    assert all(np.isnan(ep.ret) for ep in episodes) and np.isnan(mean_return(episodes))


def test_demonstrations_recorded_at_another_rate_than_the_task_are_said():
    """A robot's /joint_states recorded at 200 Hz trained a 100 Hz model without a word: each (s, s')
    pair spanned half a control step (a walkthrough). The note names both rates; within 10 %, or
    where either is unknown (an .npz, the demonstration layout), there is none."""
    from opolo_ros.data.demos import Episode, rate_note, recorded_period

    def recorded(*periods):
        return [Episode(np.zeros((3, 2), np.float32), meta={"period_s": p}) for p in periods]

    assert recorded_period(recorded(0.005, 0.005, 0.006)) == 0.005 and recorded_period(recorded()) is None
    note = rate_note(recorded(0.005, 0.005), 0.01)
    assert note.startswith("the demonstrations' states come every 0.005 s (200 Hz), the task's control "
                           "step is 0.01 s (100 Hz): each (s, s') pair spans 0.5 control steps")
    assert rate_note(recorded(0.0105), 0.01) is None and rate_note(recorded(0.0115), 0.01) is not None
    assert rate_note(recorded(0.005), None) is None
    assert rate_note([Episode(np.zeros((3, 2), np.float32))], 0.01) is None


def test_demonstrations_shorter_than_the_time_limit_are_said():
    """With time_feature, 300-step demonstrations against T=1000 never showed the discriminator an
    expert state with a time feature below 0.7: the learner's reward said nothing late in its
    episodes, without a word (a walkthrough). The longest episode is compared with
    SHORT_EPISODE_SHARE of T; none for no T (time_feature off) or no episodes."""
    from opolo_ros.data.demos import SHORT_EPISODE_SHARE, Episode, short_episodes_note

    def of(*steps):
        return [Episode(np.zeros((n + 1, 2), np.float32)) for n in steps]

    note = short_episodes_note(of(300, 250), 1000)
    assert note == ("time_feature is on with a time limit of T=1000 steps, but the 2 demonstration episodes "
                    "have 250..300 steps: no expert state has a time feature below 0.7, so the learner's "
                    "reward says nothing in the last 700 steps of its episodes. Record full-length "
                    "episodes, set max_episode_steps to 300 (an MJCF robot), or set time_feature: false")
    assert "but the demonstration episode has 300 steps: " in short_episodes_note(of(300), 1000)
    edge = int(SHORT_EPISODE_SHARE * 1000)
    assert short_episodes_note(of(100, edge), 1000) is None  # the longest counts
    assert short_episodes_note(of(edge - 1), 1000) is not None
    assert short_episodes_note(of(300), None) is None and short_episodes_note([], 1000) is None


def test_demonstrations_recorded_on_another_task_are_named_and_mjcf_files_compare_by_name():
    """The task a bag says it records is compared with the run's: another one is named (training
    and evaluate --demos refuse it); an MJCF file by its file name, since the bag may come from
    another machine's folder; no env_id said, no refusal (a mutation test)."""
    from opolo_ros.data.demos import Episode, recorded_on_other_task

    def of(*env_ids: str) -> list:
        return [Episode(np.zeros((3, 2), np.float32), meta={"env_id": e} if e else {}) for e in env_ids]

    assert recorded_on_other_task("bag", of("/home/a/robot.xml"), "/work/robot.xml") is None
    assert recorded_on_other_task("bag", of("", "Hopper-v5"), "Hopper-v5") is None
    assert recorded_on_other_task("bag", of("/home/a/arm.xml", "Walker2d-v5", ""), "/work/robot.xml") == (
        "demonstrations bag were recorded on /home/a/arm.xml, Walker2d-v5 (the bag's metadata says so), not "
        "on /work/robot.xml")


def test_a_recorded_streams_last_episode_shorter_than_the_rest_is_said():
    """A recording stopped mid-episode (record-topics --duration, a signal) ends with a part of an
    episode, which trained as a whole one without a word (a walkthrough). Said when the last of a
    stream's episodes is shorter than every other one and those have one length; not for episodes
    of varying lengths (falls), fewer than 3, or episodes that are no stream's (no period_s)."""
    from opolo_ros.data.demos import Episode, cut_last_note

    def of(*states, period=0.01):
        return [Episode(np.zeros((n, 2), np.float32), meta={"period_s": period} if period else {})
                for n in states]

    assert cut_last_note(of(301, 301, 301, 120)) == (
        "the last demonstration episode has 120 states, every other one 301: a recording cut off "
        "mid-episode (its duration, a stop)? It is used as it is; leave it out with num_demos: 3")
    assert cut_last_note(of(301, 301, 300)) is not None  # one state short is short
    assert cut_last_note(of(301, 301, 301, 301)) is None and cut_last_note(of(301, 301, 400)) is None
    assert cut_last_note(of(301, 250, 301, 120)) is None  # lengths vary: a fall or a cut, unknown
    assert cut_last_note(of(301, 120)) is None  # nothing to compare with
    assert cut_last_note(of(301, 301, 120, period=None)) is None  # an expert recorder's whole episodes
