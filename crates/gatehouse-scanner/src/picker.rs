//! Which rules may match a text: one forward lazy DFA over every rule's set
//! pattern (`engine.rs` loosens and cuts them), asked only *whether* and
//! *which*, never where.
//!
//! A `regex::RegexSet` answers the same questions but also builds what
//! finding a match's start needs, which a set is never asked: a reverse
//! NFA and a meta cache per thread. Measured on the shipped rules: 916 KB
//! of automata and a 570 KB cache before the first search for the set,
//! against 438 KB and 270 KB here (BENCHMARKS.md, session 18). The search
//! is the same engine: the regex crate's set runs this lazy DFA, and gives
//! up to the same PikeVM when the DFA keeps rebuilding its cache.

use std::panic::{RefUnwindSafe, UnwindSafe};

use regex_automata::hybrid::dfa::{Cache as DfaCache, DFA};
use regex_automata::hybrid::LazyStateID;
use regex_automata::nfa::thompson::pikevm::{Cache as PikeCache, PikeVM};
use regex_automata::nfa::thompson::{self, WhichCaptures, NFA};
use regex_automata::util::pool::Pool;
use regex_automata::{Input, MatchError, MatchKind, PatternSet};
use regex_syntax::hir::Hir;

type MakeCache<C> = Box<dyn Fn() -> C + Send + Sync + UnwindSafe + RefUnwindSafe>;

pub struct RulePicker {
    dfa: DFA,
    dfa_caches: Pool<DfaCache, MakeCache<DfaCache>>,
    /// What the regex crate falls back to when the lazy DFA gives up (its
    /// cache cleared over and over on hostile text); its cache is made
    /// only then.
    pikevm: PikeVM,
    pike_caches: Pool<PikeCache, MakeCache<PikeCache>>,
}

/// Why the set did not compile.
pub type BuildError = Box<dyn std::error::Error + Send + Sync>;

impl RulePicker {
    /// `patterns[i]` stands for rule `i` (parsed already: the set is built
    /// from the cut syntax trees, not parsed a second time).
    /// `cache_capacity` bounds the lazy DFA's cache (cleared and refilled
    /// when full).
    pub fn new(patterns: &[Hir], cache_capacity: usize) -> Result<RulePicker, BuildError> {
        let nfa = thompson::Compiler::new()
            .configure(
                NFA::config()
                    .which_captures(WhichCaptures::None)
                    .nfa_size_limit(Some(1 << 26))
                    .shrink(false),
            )
            .build_many_from_hir(patterns)?;
        // As the regex crate configures its own lazy DFA, the give-up rule
        // included: after three clears, fewer than ten bytes per state.
        let dfa = DFA::builder()
            .configure(
                DFA::config()
                    .match_kind(MatchKind::All)
                    .cache_capacity(cache_capacity)
                    .minimum_cache_clear_count(Some(3))
                    .minimum_bytes_per_state(Some(10)),
            )
            .build_from_nfa(nfa.clone())?;
        let pikevm = PikeVM::builder()
            .configure(PikeVM::config().match_kind(MatchKind::All))
            .build_from_nfa(nfa)?;
        let for_dfa = dfa.clone();
        let for_pikevm = pikevm.clone();
        Ok(RulePicker {
            dfa,
            dfa_caches: Pool::new(Box::new(move || for_dfa.create_cache())),
            pikevm,
            pike_caches: Pool::new(Box::new(move || for_pikevm.create_cache())),
        })
    }

    /// Whether any rule may match (stops at the first match).
    pub fn any(&self, text: &str) -> bool {
        let input = Input::new(text).earliest(true);
        match self.dfa.try_search_fwd(&mut self.dfa_caches.get(), &input) {
            Ok(found) => found.is_some(),
            Err(_) => self.pikevm.is_match(&mut self.pike_caches.get(), input),
        }
    }

    /// Every rule that may match.
    pub fn which(&self, text: &str) -> PatternSet {
        let input = Input::new(text);
        let mut picked = PatternSet::new(self.dfa.pattern_len());
        match self.dfa_picks(&mut self.dfa_caches.get(), &input, &mut picked) {
            Ok(()) => picked,
            Err(_) => self.pikevm_picks(&input),
        }
    }

    /// The lazy DFA's overlapping search, as a set needs it: every rule of
    /// every match state on the way. The crate's own
    /// (`try_which_overlapping_matches`) returns at each match and steps
    /// byte by byte through state kept in memory, 27 instructions a byte
    /// on prose; here runs of plain transitions go in a tight loop, and a
    /// match state's rules are taken at once. Search progress is kept where
    /// the crate's searches keep it, for its give-up rule.
    fn dfa_picks(
        &self,
        cache: &mut DfaCache,
        input: &Input<'_>,
        picked: &mut PatternSet,
    ) -> Result<(), MatchError> {
        let dfa = &self.dfa;
        let haystack = input.haystack();
        let mut sid = dfa.start_state_forward(cache, input)?;
        cache.search_start(0);
        let mut at = 0;
        while at < haystack.len() {
            if sid.is_tagged() {
                // A match state has transitions like any other.
                cache.search_update(at);
                sid = dfa
                    .next_state(cache, sid, haystack[at])
                    .map_err(|_| MatchError::gave_up(at))?;
                at += 1;
            } else {
                let mut prev = sid;
                for &byte in &haystack[at..] {
                    prev = sid;
                    sid = dfa.next_state_untagged(cache, sid, byte);
                    at += 1;
                    if sid.is_tagged() {
                        break;
                    }
                }
                if sid.is_unknown() {
                    // Not computed yet: the transition is made now.
                    cache.search_update(at - 1);
                    sid = dfa
                        .next_state(cache, prev, haystack[at - 1])
                        .map_err(|_| MatchError::gave_up(at - 1))?;
                }
            }
            if sid.is_match() {
                take_matches(dfa, cache, sid, picked);
                if picked.is_full() {
                    cache.search_finish(at);
                    return Ok(());
                }
            } else if sid.is_dead() {
                cache.search_finish(at);
                return Ok(());
            } else if sid.is_quit() {
                cache.search_finish(at);
                return Err(MatchError::quit(haystack[at - 1], at - 1));
            }
        }
        // Matches show one byte late: the end of the text is a transition too.
        sid = dfa
            .next_eoi_state(cache, sid)
            .map_err(|_| MatchError::gave_up(haystack.len()))?;
        if sid.is_match() {
            take_matches(dfa, cache, sid, picked);
        }
        cache.search_finish(haystack.len());
        Ok(())
    }

    /// The same answer from the PikeVM alone (tests of the fallback).
    #[cfg(test)]
    pub fn which_by_pikevm(&self, text: &str) -> PatternSet {
        self.pikevm_picks(&Input::new(text))
    }

    /// The crate's own overlapping search (tests of [`Self::dfa_picks`]).
    #[cfg(test)]
    pub fn which_by_crate(&self, text: &str) -> Result<PatternSet, MatchError> {
        let mut picked = PatternSet::new(self.dfa.pattern_len());
        self.dfa.try_which_overlapping_matches(
            &mut self.dfa_caches.get(),
            &Input::new(text),
            &mut picked,
        )?;
        Ok(picked)
    }

    fn pikevm_picks(&self, input: &Input<'_>) -> PatternSet {
        let mut picked = PatternSet::new(self.pikevm.pattern_len());
        self.pikevm
            .which_overlapping_matches(&mut self.pike_caches.get(), input, &mut picked);
        picked
    }
}

/// Every rule that matches in match state `sid`.
fn take_matches(dfa: &DFA, cache: &DfaCache, sid: LazyStateID, picked: &mut PatternSet) {
    for i in 0..dfa.match_len(cache, sid) {
        let _ = picked.try_insert(dfa.match_pattern(cache, sid, i));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex_automata::PatternID;

    /// A pattern whose DFA needs 2^13 states, a text that visits them, and
    /// the smallest cache the lazy DFA builds with: it gives up, and the
    /// answer comes from the PikeVM.
    #[test]
    fn a_lazy_dfa_that_gives_up_is_answered_by_the_pikevm() {
        let patterns = ["[01]*1[01]{12}2", "xyz"].map(|p| regex_syntax::parse(p).unwrap());
        let picker = (1..)
            .map(|kib| RulePicker::new(&patterns, kib << 10))
            .find_map(Result::ok)
            .expect("some capacity builds");
        let mut text: String = (0u32..40_000)
            .map(|i| {
                if i.wrapping_mul(2_654_435_761) >> 31 == 1 {
                    '1'
                } else {
                    '0'
                }
            })
            .collect();
        text.push_str("1000000000000 2 xyz");
        let mut probe = PatternSet::new(2);
        let gave_up = picker.dfa.try_which_overlapping_matches(
            &mut picker.dfa_caches.get(),
            &Input::new(&text),
            &mut probe,
        );
        assert!(gave_up.is_err(), "the lazy DFA should give up here");
        let mut own = PatternSet::new(2);
        let own_search =
            picker.dfa_picks(&mut picker.dfa_caches.get(), &Input::new(&text), &mut own);
        assert!(own_search.is_err(), "the set's own search gives up too");
        let picked = picker.which(&text);
        assert!(picked.contains(PatternID::must(1)));
        assert!(!picked.contains(PatternID::must(0)), "no 2 after 13 bits");
        assert_eq!(picked, picker.which_by_pikevm(&text));
        assert!(picker.any(&text));
        text.push_str(" 1000000000000");
        assert!(!picker.which(&text).contains(PatternID::must(0)));
        text.push('2');
        assert!(picker.which(&text).contains(PatternID::must(0)));
    }
}
