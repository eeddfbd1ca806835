"""UGNCL (evidential noisy-correspondence learning): evidence and Dempster-Shafer fusion
(:mod:`.evidential`), uncertainty-guided division (:mod:`.division`), its losses (:mod:`.losses`),
the method plug-in (:mod:`.method`) and the division audit (:mod:`.division_audit`).
"""
