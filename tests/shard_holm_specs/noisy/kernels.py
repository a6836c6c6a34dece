"""An impl of tanh that is noisier than the float32 baseline in a chosen share of trials: in a trial whose first
input element exceeds 1 - 2q (probability q for inputs uniform on [-1, 1]) every element gets a symmetric error
of ``ulps`` float32 ulp of its value (no bias: the sign alternates with the element's own bits); in the others it
is the float64 result rounded once to float32 (at least as close as the baseline)."""

import torch


def noisy_tanh(x, q=0.5, ulps=3.0, **params):
    exact = torch.tanh(x.double())
    if float(x.reshape(-1)[0]) <= 1.0 - 2.0 * q:
        return exact.to(x.dtype)
    sign = torch.where(torch.sin(x.double() * 1e4) >= 0, 1.0, -1.0)
    return (exact * (1.0 + sign * ulps * 2.0**-23)).to(x.dtype)
