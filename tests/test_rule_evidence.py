"""Rules declare their evidence as data (porter.rulebase.evidence); the engine derives the
byte and ``ast`` filters from it (porter.engine.prefilter.evidence_check).

The rule examples and the fixture trees prove that no filter drops a match
(tests/test_prefilter.py, tests/test_prefilter_equivalence.py); these tests pin what
the clauses mean and that rules no longer read the engine's facts themselves.
"""

import ast
import inspect
import re
from textwrap import dedent

from porter.engine.prefilter import byte_candidates, syntax_facts, unit_wanted
from porter.engine.prefilter.evidence_check import byte_words, holds
from porter.engine.registry import all_rules
from porter.rulebase.evidence import (
    CalledByName, CallsMethod, Imports, InFile, Keyword, MovesResultOf, Passes, String, TriesImport, Uses,
)


def facts_of(source: str):
    facts = syntax_facts(ast.parse(dedent(source)))
    facts.resolve()
    return facts


def test_byte_words_of_an_alternative_keep_every_way_to_match():
    # a or (b and c) = (a or b) and (a or c)
    clause = Uses("transformers.BitsAndBytesConfig") | (
        CallsMethod("from_pretrained") & Keyword("load_in_4bit", "load_in_8bit"))
    assert sorted(map(sorted, byte_words(clause))) == [
        [b"BitsAndBytesConfig", b"from_pretrained"], [b"BitsAndBytesConfig", b"load_in_4bit", b"load_in_8bit"]]


def test_byte_words_say_nothing_where_a_string_has_no_known_word():
    assert byte_words(String(re.compile("^cuda:")) | Keyword("device")) == []
    assert byte_words(String(re.compile("^cuda"), word="cuda") | Keyword("device")) == [frozenset({b"cuda", b"device"})]


def test_clauses_on_a_file():
    facts = facts_of("""\
        import torch
        from transformers import AutoModel
        model = AutoModel.from_pretrained(path, device_map={"": 0})
        x = torch.from_numpy(a).to(dev)
        y = t.to("cuda:1")
    """)
    assert holds(CallsMethod("from_pretrained") & Keyword("device_map"), facts, facts)
    assert not holds(CallsMethod("from_pretrained") & Keyword("load_in_8bit"), facts, facts)
    assert holds(MovesResultOf("torch.from_numpy"), facts, facts)
    assert holds(Passes(call="to", position=0, string=re.compile(r"^cuda(:\d+)?$")), facts, facts)
    assert not holds(Passes(keyword="device", string=re.compile(r"^cuda")), facts, facts)
    assert holds(Imports("transformers"), facts, facts) and not holds(Imports("xformers"), facts, facts)
    assert holds(Uses("torch.from_numpy", calls_only=True), facts, facts)


def test_unit_clauses_see_the_unit_and_in_file_sees_the_module():
    facts = facts_of("""\
        try:
            import xformers.ops as xops
        except ImportError:
            xops = None

        def attend(q, k, v):
            return q @ k

        def main():
            attend(1, 2, 3)

        class Net:
            pass

        main()
    """)
    attend, main, net = facts.units
    for unit in facts.units:
        unit.resolved_facts()
    assert not holds(Uses("xformers"), attend.facts, facts, attend)
    assert holds(InFile(TriesImport("xformers")), attend.facts, facts, attend)
    assert holds(CalledByName(), attend.facts, facts, attend) and holds(CalledByName(), main.facts, facts, main)
    assert not holds(CalledByName(), net.facts, facts, net)


def test_a_rule_acts_only_in_the_units_its_clause_names():
    rules = {rule.code: rule for rule in all_rules()}
    tp702 = rules["TP702"]
    source = dedent("""\
        from transformers import AutoModel

        def load(path):
            return AutoModel.from_pretrained(path, device_map="cuda")

        def other(path):
            return AutoModel.from_pretrained(path)
    """)
    facts = syntax_facts(ast.parse(source))
    facts.resolve()
    load, other = facts.units
    assert tp702 in byte_candidates(source.encode(), [tp702])
    assert unit_wanted(tp702, load.resolved_facts() and load, facts)
    assert not unit_wanted(tp702, other.resolved_facts() and other, facts)
    # no `device_map` word: the bytes alone rule the file out
    assert byte_candidates(source.replace("device_map", "placement").encode(), [tp702]) == []


def test_a_name_passed_where_the_file_uses_an_index():
    """PT901's join: `.to(gpu)` counts where the file also calls `set_device(gpu)`."""
    clause = Passes(call="to", position=0, name_also_at=(("set_device", 0, "index"),))
    facts = facts_of("""\
        import torch
        torch.cuda.set_device(gpu)

        def step(x):
            return x.to(gpu)

        def other(x):
            return x.to(dtype)
    """)
    step, other = facts.units
    assert holds(clause, step.resolved_facts(), facts, step)
    assert not holds(clause, other.resolved_facts(), facts, other)
    assert not holds(clause, facts_of("y = x.to(gpu)\n"), facts_of("y = x.to(gpu)\n"))


def test_rules_declare_evidence_as_data():
    """No rule hands the engine a function, and no rule module reads the engine's facts
    (``facts.``) itself: every rule declares clauses."""
    python_rules = [rule for rule in all_rules() if hasattr(rule, "needs")]  # text rules read manifests
    functions = {rule.code for rule in python_rules
                 if any(callable(value) and name != "project" for name, value in vars(rule.needs).items())}
    assert functions == set(), functions
    readers = {inspect.getmodule(rule).__name__ for rule in python_rules
               if re.search(r"\bfacts\.\w", inspect.getsource(inspect.getmodule(rule)))}
    assert readers == set(), readers
