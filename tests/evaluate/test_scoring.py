"""Answer scoring without a model: exact match, labels with confusion, JSON validity against the refs' schema."""

from cheaptune.evaluate.scoring import infer_schema, is_label_set, score_answers


def test_labels_get_accuracy_and_confusion():
    refs = ["positive", "negative", "positive", "neutral", "negative", "positive"]
    preds = ["Positive.", "positive", "positive", "neutral", "negative", "maybe"]
    s = score_answers(preds, refs)
    assert s["accuracy"] == 4 / 6 and s["exact_match"] == 3 / 6  # labels ignore case and a final period
    assert s["confusion"]["negative"] == {"positive": 1, "negative": 1}
    assert s["confusion"]["positive"] == {"positive": 2, "(other)": 1}
    assert not is_label_set(["a long free-form answer here", "another long free-form answer", "x", "y"])


def test_json_answers_checked_against_the_references_schema():
    refs = ['{"city": "Oslo", "temp": 3}', '{"city": "Rome", "temp": 21.5}']
    assert infer_schema(refs) == {"type": "object", "required": ["city", "temp"],
                                  "properties": {"city": {"type": "string"}, "temp": {"type": "number"}}}
    preds = ['{"city": "Oslo", "temp": 3}', '{"city": "Rome", "temp": "warm"}', "not json"]
    s = score_answers(preds, [*refs, refs[0]])
    assert s["json_valid"] == 2 / 3 and s["schema_valid"] == 1 / 3 and s["exact_match"] == 1 / 3
    assert "accuracy" not in s
