"""Measures of one translation: ALTI+ contributions, gradient attributions, faithfulness, head statistics and
activation patching."""
