"""The rows of one student's run: the evaluation head kept out of training, the training minibatches (with
shuffled labels, a fixed permutation of the training rows' labels), and the evaluation rows a ``held_out=``
option names.  Used by :func:`~smaso.student.compare.compare_student`; the batches stream chunk by chunk, so
memory is a few chunks whatever the dataset's size.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from teachers.ladder import Ladder
from teachers.sampling import LadderSample

if TYPE_CHECKING:
    from teachers.chunked import _SampleChunks
    from teachers.store_reader import ChunkedLadderData

__all__ = ["SHUFFLE_STREAM"]


def leaf_event_inputs(part: Any, student: Any) -> bool:
    """Whether a chunk ``part``'s inputs can be handed to ``student`` as its leaf events (integers ``(n, R_d)``,
    which ``forward_backward`` takes for one-hot inputs) instead of the one-hot ``x`` :meth:`~teachers.sampling.
    EventRows.inputs` builds per batch (R_d dim floats per row written and read again: on the 341-region ladder a
    large part of an evaluation pass): one-hot leaves without stored inputs, of the student's leaf width.  Checks
    the chunk's leaf events' range once (one host read per chunk), as ``inputs`` would per batch; a batch then
    passes ``labels_checked=True``."""
    t = part.teacher
    if part.x is not None or t.emission.kind != "onehot" or student.widths[-1] != t.emission.num_events \
            or student.ladder.num_regions[-1] != t.emission.num_regions:
        return False
    from teachers.emission import _check_leaf_events

    # the stored integers' range (uint8 on a store): widening them first (``part.leaves``, int64) wrote and read 8
    # bytes per leaf of the chunk, ~130 MB on the 341-region ladder's 65,536-row chunks
    _check_leaf_events(part.z[:, t.level_offsets[-2]:], t.emission.num_regions, t.emission.num_events, t.depth)
    return True


def evaluation_inputs(part: Any, rows: slice | torch.Tensor, dtype: torch.dtype, events: bool) -> torch.Tensor:
    """The inputs of a batch of rows ``rows`` of chunk ``part``: its leaf events (``events``: what
    :func:`leaf_event_inputs` allowed; the stored integers, no copy beyond the rows' own) or ``part.inputs``."""
    if events:
        return part.z[rows, part.teacher.level_offsets[-2]:]
    return part.inputs(rows, dtype)


def _head(chunks: ChunkedLadderData | _SampleChunks, k: int) -> LadderSample:
    """The first ``k`` rows of a chunked source, in memory (the evaluation set): a
    :class:`~teachers.sampling.LadderSample`."""
    import dataclasses

    parts, got = [], 0
    for c in range(chunks.num_chunks):
        if got >= k:
            break
        part = chunks.chunk(c)
        take = min(len(part), k - got)
        parts.append(part if take == len(part) else dataclasses.replace(
            part, z=part.z[:take], x=None if part.x is None else part.x[:take]))
        got += take
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    x = None if first.x is None else torch.cat([p.x for p in parts if p.x is not None])  # every chunk has x or none
    return dataclasses.replace(first, z=torch.cat([p.z for p in parts]), x=x)


#: The key that sets the shuffled-label stream apart from every other stream of a seed
#: (:func:`_training_labels`: ``SeedSequence([seed, chunk, SHUFFLE_STREAM])``).
SHUFFLE_STREAM = 0x5A1E


def _training_labels(part: LadderSample, c: int, off: int, shuffle_seed: int | None) -> torch.Tensor:
    """The labels chunk ``c`` (``part``) is trained on: its own, or with ``shuffle_seed`` its training rows'
    labels (rows ``off:``, never the held-out ones) permuted by a fixed permutation drawn from
    ``(shuffle_seed, c)``: the same wrong label for a row in every epoch, the label counts unchanged, in the
    memory of one chunk (rows are independent draws, so permuting within chunks is a full label shuffle's
    control: it cuts every tie between x and y)."""
    if shuffle_seed is None:
        return part.y
    from teachers.chunked import _generator

    y = part.y.clone()
    y[off:] = part.y[off:][torch.randperm(len(y) - off, generator=_generator(shuffle_seed, c, SHUFFLE_STREAM))]
    return y


def _all_training_labels(chunks: ChunkedLadderData | _SampleChunks, skip: int,
                         shuffle_seed: int | None) -> torch.Tensor:
    """Every training row's label (rows ``skip:``, in row order) as :func:`_training_batches` trains on it: the
    labels of full-batch GD."""
    parts = []
    for c in range(chunks.num_chunks):
        lo, hi = chunks.chunk_bounds(c)
        if hi > skip:
            off = max(skip - lo, 0)
            parts.append(_training_labels(chunks.chunk(c), c, off, shuffle_seed)[off:])
    return torch.cat(parts)


def _training_pieces(chunks: ChunkedLadderData | _SampleChunks, batch_size: int, gen: torch.Generator, skip: int = 0,
                     shuffle_seed: int | None = None
                     ) -> Iterator[list[tuple[LadderSample, torch.Tensor, torch.Tensor]]]:
    """The rows of :func:`_training_batches`'s minibatches, not yet built: per minibatch a list of
    ``(chunk, row indices, the chunk's training labels)``, one entry per chunk it takes rows from (the same random
    stream: building a batch draws nothing).  A population builds its members' batches from these at once."""
    pieces, have = [], 0  # the pieces of the batch being filled (across chunk boundaries)
    while True:
        for c in torch.randperm(chunks.num_chunks, generator=gen).tolist():
            lo, hi = chunks.chunk_bounds(c)
            if hi <= skip:
                continue
            part = chunks.chunk(c)
            off = max(skip - lo, 0)
            perm = torch.randperm(len(part) - off, generator=gen) + off
            labels = _training_labels(part, c, off, shuffle_seed)
            s = 0
            while s < len(perm):
                idx = perm[s: s + batch_size - have]
                pieces.append((part, idx, labels))
                have, s = have + len(idx), s + len(idx)
                if have == batch_size:
                    yield pieces
                    pieces, have = [], 0


def _training_batches(chunks: ChunkedLadderData | _SampleChunks, batch_size: int, gen: torch.Generator,
                      dtype: torch.dtype, skip: int = 0,
                      shuffle_seed: int | None = None) -> Iterator[Any]:
    """SGD minibatches ``(x, y)`` without end: each epoch visits the chunks in a random order and each
    chunk's rows in a random order (``gen``), a batch's last rows carried over into the next chunk, so
    every row is used once per epoch.  Inputs are built per batch in ``dtype``; memory is one chunk.

    :param skip: the first this many rows are never trained on (the held-out evaluation rows); ``skip=0``
        draws exactly the random stream of the pass without held-out rows.
    :param shuffle_seed: train on permuted labels (:func:`_training_labels`); the rows, their order and the
        batches are those of the run without it.
    """
    for pieces in _training_pieces(chunks, batch_size, gen, skip, shuffle_seed):
        xs = [part.inputs(idx, dtype) for part, idx, _ in pieces]
        ys = [labels[idx] for _, idx, labels in pieces]
        yield (xs[0], ys[0]) if len(xs) == 1 else (torch.cat(xs), torch.cat(ys))


def _evaluation_rows(held_out: Any, chunks: ChunkedLadderData | _SampleChunks, eval_examples: int | None,
                     ladder: Ladder) -> Any:
    """``(evaluation chunks, rows kept out of training)`` for :func:`compare_student`'s ``held_out``."""
    from teachers.chunked import as_chunks

    if held_out is False:
        return chunks, 0
    if held_out is True:
        if eval_examples is None:
            raise ValueError("held_out: evaluating on held-out rows needs eval_examples (the first eval_examples "
                             "rows are kept out of training); give eval_examples, a held-out dataset as "
                             "held_out=, or held_out=False to evaluate on every training row")
        skip = min(eval_examples, len(chunks))
        if skip >= len(chunks):
            raise ValueError(f"held_out: the {skip} evaluation rows (eval_examples) leave none of the sample's "
                             f"{len(chunks)} rows to train on; lower eval_examples, give a held-out dataset as "
                             "held_out=, or pass held_out=False")
        return chunks, skip
    if isinstance(held_out, (str, bytes)) or hasattr(held_out, "__fspath__") or isinstance(held_out, list):
        from teachers.dataset import load_dataset

        held_out = load_dataset(held_out)
    if not isinstance(held_out, LadderSample) and not hasattr(held_out, "chunk"):
        raise TypeError(f"held_out: expected True, False or a dataset of the sample's ladder, got "
                        f"{type(held_out).__name__}")
    if held_out.ladder.fingerprint() != ladder.fingerprint():
        raise ValueError("held_out: the held-out dataset was sampled from another ladder than the training sample")
    if isinstance(held_out, LadderSample) and (held_out.z is None or len(held_out) == 0):
        raise ValueError("held_out: the held-out dataset must hold at least one row with its latent events z")
    return as_chunks(held_out), 0
