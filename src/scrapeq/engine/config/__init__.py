"""The settings: one frozen object and how it loads (``settings``), how each is
parsed and checked (``specs``), what each means (``docs``), and the stored bounds every
layer checks against (``limits``).
"""
