# SPDX-License-Identifier: Apache-2.0
"""dspipe's transforms against albumentations 2.0.8 itself (installed by scripts/test.sh).

For each supported transform, with its parameters drawn by dspipe for several (seed, index),
on several image sizes with a mask: dspipe's output (the loader's fused code) equals
albumentations' apply / apply_to_mask given the same parameters - images within 0 (exact ops)
/ 1 / 2 (interpolating ops) levels, masks identical. Degenerate ranges (p=1, fixed values) are
compared through albumentations' own Compose call too. docs/TRANSFORMS.md's "vs
albumentations" column is the max |diff| this file allows (and sees).
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

A = pytest.importorskip("albumentations")
cv2 = pytest.importorskip("cv2")
from dspipe import _dspipe  # noqa: E402

assert A.__version__ == "2.0.8", A.__version__
warnings.filterwarnings("ignore", module="albumentations")

SIZES = ((37, 53), (64, 64), (96, 70))
SEEDS = range(4)


def sample(h, w, channels=3, seed=0):
    """Detailed content (noise on gradients) and a three-class mask."""
    r = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.sin(x * 0.2) * 60 + np.cos(y * 0.13) * 60 + 128
    img = np.stack([base, base[::-1], base[:, ::-1]], -1) + r.normal(0, 20, (h, w, 3))
    img = np.clip(img, 0, 255).astype(np.uint8)
    mask = ((x - w / 3) ** 2 + (y - h / 2) ** 2 < (min(h, w) / 3) ** 2).astype(np.uint8) * 2
    mask[: h // 4, : w // 4] = 1
    return (img if channels == 3 else np.ascontiguousarray(img[..., 0])), mask


def kwargs_for(params, img):
    kw = dict(params)
    for k in ("matrix", "bbox_matrix"):
        if k in kw:
            kw[k] = np.array(kw[k], dtype=np.float64)
    for k in ("map_x", "map_y"):
        if k in kw:
            kw[k] = np.array(kw[k], dtype=np.float32)
    for k in ("output_shape", "crop_coords"):
        if k in kw:
            kw[k] = tuple(kw[k])
    if isinstance(kw.get("kernel"), list):  # MedianBlur's kernel is its aperture (an int)
        kw["kernel"] = np.array(kw["kernel"])
    if "holes" in kw:
        kw["holes"] = np.array(kw["holes"], dtype=np.int64).reshape(-1, 4)
    kw["shape"] = img.shape
    return kw


def check(t, tol=0, sizes=SIZES, channels=3, beta=None):
    """dspipe (fused path) == albumentations' apply with dspipe's draws; returns max |diff|."""
    spec = json.dumps(A.to_dict(A.Compose([t])))
    worst = 0
    for h, w in sizes:
        img, mask = sample(h, w, channels)
        for s in SEEDS:
            draws = json.loads(_dspipe.transforms_draws(spec, h, w, mask, s, 0, 7))
            ours, ours_mask = _dspipe.transforms_apply(spec, img, mask, s, 0, 7)
            if not draws:  # drawn as a no-op (albumentations returns the input)
                ref, ref_mask = img, mask
            else:
                assert len(draws) == 1
                kw = kwargs_for(draws[0]["params"], img)
                if beta is not None:  # data-dependent apply arguments, albumentations' formula
                    kw.update(beta(draws[0]["params"], img))
                ref = np.asarray(t.apply(img.copy(), **kw))
                ref_mask = (np.asarray(t.apply_to_mask(mask.copy(), **kw))
                            if hasattr(t, "apply_to_mask") else mask)
            if ref.ndim == 3 and ours.ndim == 2:
                ref = ref[..., 0]
            assert ours.shape == ref.shape and ours_mask.shape == ref_mask.shape, (
                type(t).__name__, ours.shape, ref.shape, draws)
            if ref.size:
                worst = max(worst, int(np.abs(ref.astype(int) - ours.astype(int)).max()))
            np.testing.assert_array_equal(ours_mask, ref_mask, err_msg=f"{t} {h}x{w} seed {s}")
    assert worst <= tol, f"{type(t).__name__}: max |diff| {worst} > {tol}"
    return worst


EXACT = [
    A.HorizontalFlip(p=1), A.VerticalFlip(p=1), A.Transpose(p=1), A.RandomRotate90(p=1),
    A.SquareSymmetry(p=1), A.D4(p=1),
    A.RandomCrop(30, 40, p=1),
    A.RandomCrop(80, 80, pad_if_needed=True, fill=3, fill_mask=255, pad_position="random", p=1),
    A.RandomCrop(80, 80, pad_if_needed=True, border_mode=cv2.BORDER_REFLECT_101, p=1),
    A.CenterCrop(30, 40, p=1), A.CenterCrop(80, 100, pad_if_needed=True, p=1),
    A.PadIfNeeded(100, 90, fill=9, fill_mask=255, p=1),
    A.PadIfNeeded(min_height=None, min_width=None, pad_height_divisor=32, pad_width_divisor=16,
                  position="top_left", border_mode=cv2.BORDER_REPLICATE, p=1),
    A.Pad(padding=(3, 5, 7, 9), border_mode=cv2.BORDER_WRAP, p=1),
    A.CropNonEmptyMaskIfExists(20, 24, p=1),
    A.CropNonEmptyMaskIfExists(20, 24, ignore_values=[2], p=1),
    A.Affine(translate_px=(-5, 5), p=1),
    A.RandomBrightnessContrast(p=1), A.RandomGamma(p=1), A.HueSaturationValue(p=1),
    A.ToGray(p=1), A.ToGray(method="average", p=1), A.ToGray(method="desaturation", p=1),
    A.ToGray(method="max", p=1), A.ToGray(method="from_lab", p=1),
    A.CoarseDropout(fill=11, fill_mask=255, p=1),
    A.CoarseDropout(num_holes_range=(2, 4), hole_height_range=(3, 10), hole_width_range=(4, 12),
                    p=1),
    # Issue 40 items 10 and 23. MotionBlur: albumentations' apply given dspipe's kernel.
    A.MedianBlur(p=1), A.MedianBlur(blur_limit=(9, 13), p=1),
    A.MotionBlur(p=1), A.MotionBlur(blur_limit=(9, 11), angle_range=(30, 60),
                                    direction_range=(-0.5, 0.5), p=1),
    A.ToGray(method="pca", p=1),
]

INTERPOLATING = [
    A.Rotate(limit=30, p=1), A.Rotate(limit=30, border_mode=cv2.BORDER_REFLECT_101, p=1),
    A.Rotate(limit=30, crop_border=True, interpolation=cv2.INTER_CUBIC, p=1),
    A.Affine(scale=(0.8, 1.2), translate_percent=(-0.1, 0.1), rotate=(-20, 20), shear=(-10, 10),
             fill=7, fill_mask=255, p=1),
    A.Affine(scale=(0.7, 1.3), keep_ratio=True, balanced_scale=True, rotate=10, fit_output=True,
             p=1),
    A.ShiftScaleRotate(p=1),
    A.RandomResizedCrop(size=(48, 40), p=1),
    A.RandomResizedCrop(size=(32, 32), area_for_downscale="image_mask", p=1),
    A.RandomSizedCrop(min_max_height=(20, 30), size=(40, 40), w2h_ratio=1.2, p=1),
    A.Resize(50, 70, p=1), A.Resize(20, 30, interpolation=cv2.INTER_AREA, p=1),
    A.SmallestMaxSize(max_size=48, p=1), A.LongestMaxSize(max_size=[40, 80], p=1),
    A.SmallestMaxSize(max_size_hw=(40, None), p=1),
    A.ColorJitter(p=1), A.CLAHE(p=1), A.GaussianBlur(p=1),
    # Kernels of 13 px and more: cv2.filter2D's DFT path, which rounds differently in OpenCV 4.6
    # and 4.11 (within 1); up to 11 px (its direct sum) bit-identical, in EXACT above.
    A.MotionBlur(blur_limit=(13, 25), allow_shifted=False, p=1),
    A.GaussianBlur(blur_limit=(3, 9), sigma_limit=(0.3, 2), p=1),
    # The non-affine ones: the map is dspipe's draw (passed to albumentations as map_x/map_y).
    A.GridDistortion(p=1), A.GridDistortion(num_steps=3, distort_limit=0.5, normalized=False,
                                            border_mode=cv2.BORDER_REFLECT_101, p=1),
    A.ElasticTransform(alpha=20, sigma=5, p=1, fill=9, fill_mask=255),
    A.ElasticTransform(alpha=5, sigma=3, approximate=True, same_dxdy=True,
                       noise_distribution="uniform", p=1),
]


@pytest.mark.parametrize("t", EXACT, ids=lambda t: repr(t)[:60])
def test_exact_transforms_equal_albumentations(t):
    check(t, tol=0)
    check(t, tol=0, sizes=((41, 45),), channels=1)


@pytest.mark.parametrize("t", INTERPOLATING, ids=lambda t: repr(t)[:60])
def test_interpolating_transforms_within_2_of_albumentations(t):
    # ColorJitter: cv2.addWeighted rounds differently in OpenCV 4.6 (dspipe) and 4.11 (the
    # wheel albumentations pulls in), so does cv2.filter2D's DFT path (MotionBlur's large
    # kernels); the rest are bit-exact today but allowed 2.
    check(t, tol=2)


def test_brightness_by_mean_and_safe_range():
    # beta = fraction * mean(image) (data-dependent: computed by albumentations' formula here).
    def beta(params, img):
        return {"beta": params["beta_fraction"] * float(np.mean(img))}
    check(A.RandomBrightnessContrast(brightness_by_max=False, p=1), tol=0, beta=beta)

    def safe(params, img):  # get_safe_brightness_contrast_params, alpha > 0 here
        b = float(np.clip(params["beta_fraction"] * 255.0, 0, 255))
        return {"beta": b, "alpha": min(params["alpha"], (255.0 - b) / 255.0)}
    check(A.RandomBrightnessContrast(ensure_safe_range=True, contrast_limit=(0.1, 0.2), p=1),
          tol=0, beta=safe)


def test_degenerate_ranges_through_albumentations_compose():
    """Fixed parameters: albumentations' own Compose call, no draws passed across."""
    img, mask = sample(64, 80)
    for ts in ([A.Resize(40, 50)], [A.CenterCrop(30, 30), A.HorizontalFlip(p=1)],
               [A.PadIfNeeded(100, 100, fill=4, fill_mask=255), A.Transpose(p=1)],
               [A.Affine(rotate=12, scale=0.9, translate_percent=0.05, p=1)],
               [A.Rotate(limit=(20, 20), p=1, fill_mask=255)],
               [A.RandomBrightnessContrast(brightness_limit=(0.1, 0.1), contrast_limit=(0.2, 0.2),
                                           p=1)],
               [A.RandomGamma(gamma_limit=(130, 130), p=1)],
               # OneOrOther: the first when random() < p, else the second, forced (p=0 never).
               [A.OneOrOther(A.HorizontalFlip(p=0.1), A.Transpose(p=0.1), p=1)],
               [A.OneOrOther(A.HorizontalFlip(p=0.1), A.Compose([A.Transpose(p=1)], p=0), p=0)],
               [A.OneOrOther(A.HorizontalFlip(p=0), A.VerticalFlip(p=0.5), p=1)],
               # RGBShift: pixel units (divided by 255, then times 255), fractions (|limit| <=
               # 1: times 255), a fractional shift truncated toward zero (-7.5 -> -7).
               [A.RGBShift((10, 10), (-20, -20), (5, 5), p=1)],
               [A.RGBShift((0.1, 0.1), (-0.5, -0.5), (-7.5, -7.5), p=1)],
               [A.HueSaturationValue((10, 10), (-20, -20), (5, 5), p=1)],
               [A.GaussianBlur(blur_limit=(5, 5), sigma_limit=(1.5, 1.5), p=1)],
               [A.CLAHE(clip_limit=(3, 3), p=1)],
               [A.ToGray(p=1)],
               # GaussNoise with zero spread: the noise is the fixed mean offset.
               [A.GaussNoise(std_range=(0, 0), mean_range=(0.1, 0.1), p=1)],
               [A.GaussNoise(std_range=(0, 0), mean_range=(-0.2, -0.2), per_channel=False, p=1)],
               [A.SmallestMaxSize(48), A.CenterCrop(48, 48), A.VerticalFlip(p=1)]):
        aug = A.Compose(ts)
        want = aug(image=img, mask=mask)
        got, got_mask = _dspipe.transforms_apply(json.dumps(A.to_dict(aug)), img, mask, 0, 0, 0)
        assert got.shape == want["image"].shape, ts
        d = int(np.abs(got.astype(int) - want["image"].astype(int)).max())
        # A multi-step geometric pipeline is one fused warp (fixed-point coordinates instead of
        # cv2.resize's coefficients: within 2 on these images), its mask may differ along edges.
        assert d <= (2 if len(ts) > 1 else 1), (ts, d)
        equal = float((got_mask == want["mask"]).mean())
        assert equal >= (0.995 if len(ts) > 1 else 1.0), (ts, equal)
        assert set(np.unique(got_mask)) <= set(np.unique(mask)) | {255}, ts


def test_blurs_and_pca_gray_with_fixed_parameters_are_albumentations_own_output():
    """Issue 40 items 10 and 23, through albumentations' own Compose call (no draws passed
    across): MedianBlur, MotionBlur (fixed size, angle and direction, not shifted: its kernel is
    then create_motion_kernel's, deterministic) and ToGray(method="pca"), on 1- and 3-channel
    uint8 images, bit-identical; MotionBlur kernels of 13 px and more within 1 (cv2.filter2D
    switches to a DFT there, whose rounding differs between OpenCV 4.6 and 4.11)."""
    cases = [A.MedianBlur(blur_limit=(k, k), p=1) for k in (3, 5, 7, 9, 15)]
    cases += [A.MotionBlur(blur_limit=(k, k), angle_range=(a, a), direction_range=(d, d),
                           allow_shifted=False, p=1)
              for k in (3, 5, 7, 9, 11, 13, 21)
              for a in (0, 30, 45, 60, 90, 135, 200.5, 270, 333.3)
              for d in (-1, -0.5, 0, 0.3, 1)]
    cases.append(A.ToGray(method="pca", p=1))
    for h, w in ((37, 53), (64, 64), (96, 70)):
        img, mask = sample(h, w, seed=h)
        for channels in (3, 1):
            x = img if channels == 3 else np.ascontiguousarray(img[..., 1])
            for t in cases:
                aug = A.Compose([t])
                want = aug(image=x, mask=mask)["image"]
                got, got_mask = _dspipe.transforms_apply(json.dumps(A.to_dict(aug)), x, mask,
                                                         0, 0, 0)
                assert got.shape == want.shape, (t, got.shape, want.shape)
                d = int(np.abs(got.astype(int) - want.astype(int)).max())
                dft = isinstance(t, A.MotionBlur) and t.blur_limit[0] >= 13
                assert d <= (1 if dft else 0), (t, h, w, channels, d)
                assert np.array_equal(got_mask, mask)
    # PCA on a photo-like image with a dominant colour axis, and on a constant one (all 0). (On
    # a 1-row image albumentations returns the values as a W x 1 column: its reshape's bug.)
    y, x = np.mgrid[0:50, 0:60]
    smooth = np.stack([x * 4, x * 2 + y, 255 - y * 3], -1).clip(0, 255).astype(np.uint8)
    for img in (smooth, np.full((9, 7, 3), (10, 200, 30), np.uint8)):
        aug = A.Compose([A.ToGray(method="pca", p=1)])
        got, _ = _dspipe.transforms_apply(json.dumps(A.to_dict(aug)), img, None, 0, 0, 0)
        assert np.array_equal(got, aug(image=img)["image"])


def test_to_dict_round_trips_albumentations_documents():
    """A.to_dict(aug) read by dspipe and written back is A.to_dict(aug) (defaults, ranges)."""
    aug = A.Compose([
        A.SmallestMaxSize(max_size=512), A.RandomCrop(512, 512), A.SquareSymmetry(),
        A.Affine(rotate=(-15, 15), translate_percent=0.05), A.ShiftScaleRotate(),
        A.OneOf([A.HorizontalFlip(), A.Rotate(limit=20)], p=0.3),
        A.SomeOf([A.VerticalFlip(), A.Transpose()], n=1),
        A.Sequential([A.CLAHE(), A.ColorJitter()], p=0.2),
        A.RandomBrightnessContrast(), A.GaussNoise(), A.CoarseDropout(fill_mask=255),
        A.MedianBlur(blur_limit=9), A.MotionBlur(blur_limit=(4, 10), angle_range=(10, 80),
                                                 direction_range=(0, 0.5), allow_shifted=False),
        A.ToGray(method="pca"), A.Normalize()])
    want = json.loads(json.dumps(A.to_dict(aug)))
    got = json.loads(_dspipe.transforms_to_json(json.dumps(want)))
    assert got == want


def nested_composes(levels):
    """`levels` Compose documents one inside the other around a HorizontalFlip, as JSON text."""
    inner = '{"__class_fullname__": "HorizontalFlip", "p": 1}'
    head = '{"__class_fullname__": "Compose", "p": 1, "transforms": ['
    return head * levels + inner + "]}" * levels


def test_deep_nesting_is_a_clean_error_not_a_crash():
    """Issue 39 item 7: 20,000 nested Composes or 200,000 '[' killed the interpreter (SIGSEGV).
    albumentations stops with RecursionError; dspipe refuses past 64 container levels, naming
    the limit, and 64 levels still run."""
    img, mask = sample(8, 8)
    got, _ = _dspipe.transforms_apply(nested_composes(64), img, mask, 0, 0, 0)
    assert np.array_equal(got, img[:, ::-1])
    with pytest.raises(ValueError, match=r"limit of 64 \(kMaxSpecDepth\)"):
        _dspipe.transforms_to_json(nested_composes(65))
    for text in (nested_composes(20000), "[" * 200000, "[" * 200000 + "]" * 200000):
        with pytest.raises(ValueError, match=r"64 levels \(kMaxSpecDepth\)"):
            _dspipe.transforms_to_json(text)
    with pytest.raises(RecursionError):
        A.from_dict({"transform": json.loads(nested_composes(20000))})


def test_someof_inside_oneof_keeps_its_own_p():
    """Issue 39 item 8 (a): albumentations' SomeOf checks its p even when a OneOf forces it;
    dspipe applied it always. Both flip about 30% of 2000 samples (5 sigma: 0.05)."""
    img, mask = sample(6, 6)
    aug = A.Compose([A.OneOf([A.SomeOf([A.HorizontalFlip(p=1)], n=1, p=0.3)], p=1)], seed=3)
    n = 2000
    want = np.mean([not np.array_equal(aug(image=img)["image"], img) for _ in range(n)])
    text = json.dumps(A.to_dict(aug))
    got = np.mean([not np.array_equal(_dspipe.transforms_apply(text, img, mask, 0, 0, i)[0], img)
                   for i in range(n)])
    assert abs(want - 0.3) < 0.05, want
    assert abs(got - 0.3) < 0.05, got


def test_oneof_with_only_p0_children_is_refused():
    """Issue 39 item 8 (b): albumentations divides by the children's p sum (ZeroDivisionError);
    dspipe accepted it and always ran the last child. A p=0 child is never run."""
    with pytest.raises(ZeroDivisionError):
        A.OneOf([A.HorizontalFlip(p=0), A.VerticalFlip(p=0)], p=1)
    doc = {"__class_fullname__": "OneOf", "p": 1, "transforms": [
        {"__class_fullname__": "HorizontalFlip", "p": 0},
        {"__class_fullname__": "VerticalFlip", "p": 0}]}
    with pytest.raises(ValueError, match=r"transform 1 \(OneOf\): every transform inside"):
        _dspipe.transforms_to_json(json.dumps([doc]))
    img, mask = sample(6, 6)
    doc["transforms"][1]["p"] = 0.5  # HorizontalFlip(p=0) is never picked, VerticalFlip always
    aug = A.Compose([A.OneOf([A.HorizontalFlip(p=0), A.VerticalFlip(p=0.5)], p=1)], seed=1)
    for i in range(50):
        got, _ = _dspipe.transforms_apply(json.dumps([doc]), img, mask, 0, 0, i)
        assert np.array_equal(got, img[::-1]), i
        assert np.array_equal(aug(image=img)["image"], img[::-1]), i


def test_fractional_and_huge_integer_arguments_are_refused():
    """Issue 39 item 8 (c): size [32.9, 32.2] was truncated to 32 (albumentations refuses a
    fractional part); values past INT_MAX were undefined behaviour (refused now)."""
    with pytest.raises(ValueError, match="fractional part"):
        A.RandomResizedCrop(size=(32.9, 32.2))
    doc = {"__class_fullname__": "RandomResizedCrop", "p": 1, "size": [32.9, 32.2]}
    with pytest.raises(ValueError, match=r"RandomResizedCrop\): argument size must be an integer"):
        _dspipe.transforms_to_json(json.dumps([doc]))
    doc["size"] = [2**31, 32]
    with pytest.raises(ValueError, match=r"argument size=2147483648 is outside what an int holds"):
        _dspipe.transforms_to_json(json.dumps([doc]))
    doc["size"] = [32.0, 16]  # whole numbers written as floats: as albumentations, ints
    got = json.loads(_dspipe.transforms_to_json(json.dumps([doc])))["transform"]["transforms"][0]
    assert got["size"] == list(A.RandomResizedCrop(size=(32.0, 16)).size) == [32, 16]


def test_tofloat_and_totensorv2_round_trip_and_tofloat_is_albumentations_scale():
    """Issue 40 item 10: a tutorial's tail, A.ToFloat(...) + ToTensorV2(...), reads back as
    A.to_dict writes it; ToFloat's scale is albumentations' (x / max_value; null: 255)."""
    pytest.importorskip("torch")
    from albumentations.pytorch import ToTensorV2
    from dspipe import transforms as T

    for tail in ([A.ToFloat(), ToTensorV2()], [A.ToFloat(max_value=4095.0),
                                               ToTensorV2(transpose_mask=True)],
                 [A.Normalize(), ToTensorV2()]):
        want = json.loads(json.dumps(A.to_dict(A.Compose([A.HorizontalFlip(), *tail]))))
        assert json.loads(_dspipe.transforms_to_json(json.dumps(want))) == want
    img, _ = sample(5, 7)
    for max_value in (None, 255.0, 4095.0):
        ref = A.ToFloat(max_value=max_value)(image=img)["image"]
        scale = 255.0 if max_value is None else max_value
        ours = img.astype(np.float32) * np.float32(1.0 / np.float32(scale))  # the normalize stage
        assert np.all(np.abs(ours - ref) <= np.spacing(ref)), max_value
    assert T.ToTensorV2().to_dict()["transform"] == {
        "__class_fullname__": "ToTensorV2", "p": 1.0, "transpose_mask": False}
