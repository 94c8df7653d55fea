"""The results of one run or one codes file as the printed table, and the collapse warning.

Every row label comes from `sgh.metrics.conventions.LABELS`, so the table names each number
with its convention, as `metrics.json` does.
"""

from __future__ import annotations

from sgh.config import EvalConfig
from sgh.methods import METHODS
from sgh.metrics.conventions import LABELS, SIMILARITY_TITLES


def run_title(metrics: dict) -> str:
    """`mnist, SGH 32 bits, objective paper, 20000 steps` / `mnist, ITQ 32 bits`."""
    method = METHODS[metrics["method"]]
    title = f"{metrics['dataset']}, {method.title} {metrics['bits']} bits"
    if method.uses_tensorflow:
        title += f", objective {metrics['objective']}, {metrics['steps']} steps"
    return title


def collapse_warning(metrics: dict, bits: int) -> str | None:
    """A one-line warning when the codes have collapsed, so it never passes unnoticed."""
    distinct, dead = metrics["distinct_database_codes"], metrics["dead_bits"]
    n_database = metrics["n_database"]
    if dead > 0 or distinct < min(n_database, 2**bits) / 100:
        return (f"code collapse: {distinct} distinct codes for {n_database} database "
                f"items, {dead} of {bits} bits never change; the codes carry little information "
                "(check the feature scale, model.init, trainer.learning_rate)")
    return None


def results_table(metrics: dict, title: str, config: EvalConfig) -> str:
    """The printed results: every number with its convention."""
    k = config.recall_k
    rows = [(title, "")]
    # The Hamming ranking is scored tie-aware (with a ties-by-index twin and hash lookup); the
    # others rank by real-valued scores, ties by id.
    hamming = "map_stable" in metrics or f"recall{k}@{config.recall_n[0]}_stable" in metrics
    ranking = metrics.get("ranking", "hamming").split(":")[0]
    ties = "tie-aware" if hamming else f"{ranking} ranking, ties by id"
    similarity = SIMILARITY_TITLES[metrics.get("similarity", "euclidean")]
    if "map" in metrics:
        rows.append((LABELS["map"].format(ties=ties), f"{metrics['map']:.4f}"))
        if "map_stable" in metrics:
            rows.append((LABELS["map_stable"], f"{metrics['map_stable']:.4f}"))
        for cut in config.map_k:
            rows.append((LABELS["map_at_k"].format(k=cut, denominator=metrics["map_k_denominator"],
                                                   ties=ties),
                         f"{metrics[f'map@{cut}']:.4f}, {metrics[f'precision@{cut}']:.4f}"))
        r = config.radius
        if f"lookup_precision@r{r}" in metrics:
            rows.append((LABELS["lookup"].format(radius=r),
                         f"{metrics[f'lookup_precision@r{r}']:.4f}, "
                         f"{metrics[f'lookup_recall@r{r}']:.4f}"))
    for n in config.recall_n:
        if f"recall{k}@{n}" in metrics:
            rows.append((LABELS["recall"].format(k=k, n=n, similarity=similarity, ties=ties),
                         f"{metrics[f'recall{k}@{n}']:.4f}"))
    rows += _byte_decoder_rows(metrics, config, similarity)
    curve = metrics.get("shortlist_curve")
    if curve:
        recall_key = next(key for key in curve if key.startswith("recall"))
        for size, recall, rate in zip(curve["shortlist"], curve[recall_key],
                                      curve["queries_per_second"], strict=True):
            rows.append((f"two-stage search, shortlist {size}: "
                         f"{recall_key.replace('recall', 'Recall')}, queries/s",
                         f"{recall:.4f}, {rate:,.0f}"))
    rows.append(("distinct database codes / database items",
                 f"{metrics['distinct_database_codes']} / {metrics['n_database']}"))
    rows.append(("dead bits (constant over the database)", f"{metrics['dead_bits']}"))
    if "ms_per_step" in metrics:
        rows.append(("training time" + (" (every candidate)" if "recipe_chosen" in metrics
                                         else "") + "; median time per step",
                     f"{metrics['train_seconds']:.1f} s; {metrics['ms_per_step']:.2f} ms"))
    elif "train_seconds" in metrics:
        rows.append(("training (fitting) time", f"{metrics['train_seconds']:.1f} s"))
    if "recipe_chosen" in metrics:
        rows.append((f"recipe chosen ({metrics['recipe_figure']})",
                     f"{metrics['recipe_chosen']} (" + ", ".join(
                         f"{name} {entry['validation']:.4f}"
                         for name, entry in metrics["recipe_candidates"].items()) + ")"))
    if "validation_metric" in metrics:
        metric = metrics["validation_metric"]
        rows.append((f"codes from step (best validation {metric})",
                     f"{metrics['best_step']} ({metrics[f'best_validation_{metric}']:.4f})"))
    by_score = metrics.get(f"validation_recall{k}@100_by_score")
    if by_score:
        shown = {name: value for name, value in by_score.items() if not name.startswith("joint ")}
        rows.append((f"score for a scan / rescoring (validation Recall{k}@100)",
                     f"{metrics['score_for_scan']} / {metrics['score_for_rescoring']} ("
                     + ", ".join(f"{name} {value:.4f}" for name, value in shown.items())
                     + f"; joint weight {metrics['joint_weight']:g})"))
    by_encoding = metrics.get(f"validation_recall{k}@100_by_encoding")
    if by_encoding:
        rows.append((f"byte decoder's encoding (validation Recall{k}@100)",
                     f"{metrics['byte_decoder_encoding']} ("
                     + ", ".join(f"{name} {value:.4f}" for name, value in by_encoding.items())
                     + ")"))
    width = max(len(label) for label, _ in rows)
    lines = [f"  {label:<{width}}  {value}".rstrip() for label, value in rows]
    rule = "  " + "-" * (width + 12)
    footer = f"  ranking: {metrics['ranking']}\n" if not hamming and "ranking" in metrics else ""
    footer += f"  queries: {metrics['n_queries']}"
    if "protocol" in metrics:
        footer += f" ({metrics['protocol']})"
    return "\n".join([rule, lines[0], rule, *lines[1:], rule, footer])


def _byte_decoder_rows(metrics: dict, config: EvalConfig, similarity: str) -> list:
    """The byte decoder index's search of the same queries (`byte_decoder_*` keys), if scored."""
    if "byte_decoder_ranking" not in metrics:
        return []
    k = config.recall_k
    encoding = metrics.get("byte_decoder_index_encoding", metrics.get("byte_decoder_encoding", ""))
    name = f"byte decoder index ({encoding}): " if encoding else "byte decoder index: "
    rows = []
    if "byte_decoder_map" in metrics:
        rows.append((name + LABELS["map"].format(ties="ties by id"),
                     f"{metrics['byte_decoder_map']:.4f}"))
    cutoffs = [n for n in config.recall_n if f"byte_decoder_recall{k}@{n}" in metrics]
    if cutoffs:
        label = LABELS["recall"].format(k=k, n="/@".join(map(str, cutoffs)),
                                        similarity=similarity, ties="ties by id")
        rows.append((name + label, ", ".join(f"{metrics[f'byte_decoder_recall{k}@{n}']:.4f}"
                                             for n in cutoffs)))
    return rows
