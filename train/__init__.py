"""magnetsdk.train: MAGNET adaptation of a decoder (hybrid mask, three objectives, LoRA).

Training uses the same forward function (:mod:`magnetsdk.forward`), attention masks
(:mod:`magnetsdk.attention`) and token layout (:mod:`magnetsdk.layout`) as serving.
"""
