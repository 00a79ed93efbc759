# SPDX-License-Identifier: Apache-2.0
"""Issue 36: DICOM series (pydicom writes them here, files named in shuffled order) build into one
record per slice of the closest canonical (RAS) array: the array nibabel's as_closest_canonical
gives for the same voxels placed by the same DICOM geometry, with RescaleSlope/Intercept applied
(CT in Hounsfield units) and a NIfTI label map aligned in every slice. Bad series are refused,
naming the folder and the files."""
from __future__ import annotations

import json
import shutil

import pytest

import dspipe

nib = pytest.importorskip("nibabel")  # the CI venv installs both (scripts/test.sh)
pydicom = pytest.importorskip("pydicom")

# Acquisitions: (row cosine, column cosine) in DICOM's LPS patient coordinates.
AXIAL = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0))
SAGITTAL = ((0.0, 1.0, 0.0), (0.0, 0.0, -1.0))
CORONAL_TILTED_ROWS = ((-1.0, 0.0, 0.0), (0.0, 0.0, -1.0))  # rows run right to left


def _write_series(folder, data, cosines, spacing, origin, slope=1.0, inter=0.0, signed=False,
                  bits_stored=16, series_uid="1.2.826.0.1.3680043.8.498.1", rle=False,
                  order_seed=0, normal_sign=1.0):
    """Writes data[i, j, k] (i along a row, j down the columns, k through the stack) as one
    file per k, named in shuffled order. Returns the RAS affine of that voxel grid, computed
    from DICOM's definitions (PixelSpacing = [row spacing, column spacing])."""
    import numpy as np
    from pydicom.dataset import FileDataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, RLELossless, generate_uid

    folder.mkdir(parents=True)
    row, col = np.array(cosines[0]), np.array(cosines[1])
    normal = np.cross(row, col) * normal_sign
    row_mm, col_mm, step = spacing
    lps = np.eye(4)
    lps[:3, 0] = row * col_mm
    lps[:3, 1] = col * row_mm
    lps[:3, 2] = normal * step
    lps[:3, 3] = origin
    nz = data.shape[2]
    names = [f"IM{n:04d}.dcm" for n in np.random.default_rng(order_seed).permutation(nz)]
    for k in range(nz):
        meta = FileMetaDataset()
        meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.2"  # CT Image Storage
        meta.MediaStorageSOPInstanceUID = generate_uid()
        meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds = FileDataset(str(folder / names[k]), {}, file_meta=meta, preamble=b"\0" * 128)
        ds.SOPClassUID = meta.MediaStorageSOPClassUID
        ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
        ds.Modality = "CT"
        ds.SeriesInstanceUID = series_uid
        ds.StudyInstanceUID = "1.2.826.0.1.3680043.8.498.2"
        ds.InstanceNumber = int(nz - k)  # deliberately not the stack order
        ds.ImagePositionPatient = [float(v) for v in (lps @ [0, 0, k, 1])[:3]]
        ds.ImageOrientationPatient = [float(v) for v in (*row, *col)]
        ds.PixelSpacing = [row_mm, col_mm]
        ds.SliceThickness = abs(step)
        ds.SamplesPerPixel = 1
        ds.PhotometricInterpretation = "MONOCHROME2"
        ds.Rows, ds.Columns = data.shape[1], data.shape[0]
        ds.BitsAllocated = 16
        ds.BitsStored = bits_stored
        ds.HighBit = bits_stored - 1
        ds.PixelRepresentation = 1 if signed else 0
        ds.RescaleSlope = slope
        ds.RescaleIntercept = inter
        plane = np.ascontiguousarray(data[:, :, k].T).astype(np.int16 if signed else np.uint16)
        if rle:
            ds.compress(RLELossless, plane)
        else:
            ds.PixelData = plane.tobytes()
        ds.save_as(str(folder / names[k]), enforce_file_format=True)
    return np.diag([-1.0, -1.0, 1.0, 1.0]) @ lps


def _canonical(values, ras):
    import numpy as np

    img = nib.as_closest_canonical(nib.Nifti1Image(values, ras))
    return np.asarray(img.dataobj), img.affine


def _records(out):
    import numpy as np

    loader = dspipe.Loader(str(out), batch_size=1, shuffle=False, device="cpu", normalize=False)
    got = {}
    for batch in loader:
        mask = batch["mask"]
        got[int(batch["index"][0])] = (np.asarray(batch["image"])[0],
                                       None if mask is None else np.asarray(mask)[0])
    return [got[i] for i in range(len(got))]


def _manifest(out):
    m = json.loads((out / "manifest.json").read_text())
    return m.get("manifest", m)


@pytest.mark.parametrize("acq", ["axial", "sagittal", "coronal", "axial-feet-first"])
def test_a_ct_series_slices_as_nibabels_canonical_array_in_hounsfield_units(tmp_path, acq):
    import numpy as np

    cosines, normal_sign = {"axial": (AXIAL, 1.0), "sagittal": (SAGITTAL, 1.0),
                            "coronal": (CORONAL_TILTED_ROWS, 1.0),
                            "axial-feet-first": (AXIAL, -1.0)}[acq]
    rng = np.random.default_rng(3)
    stored = rng.integers(0, 4096, size=(7, 5, 6)).astype(np.uint16)  # 12-bit CT values
    src = tmp_path / "ct"
    ras = _write_series(src / "images" / "case1", stored, cosines, (0.8, 0.7, 2.5),
                        (-100.0, -120.0, 50.0), inter=-1024.0, bits_stored=12,
                        normal_sign=normal_sign)
    labels = rng.integers(0, 3, size=stored.shape).astype(np.uint8)
    (src / "labels").mkdir()
    nib.save(nib.Nifti1Image(labels, ras), str(src / "labels" / "case1.nii.gz"))
    want_img, want_affine = _canonical(stored.astype(np.int32) - 1024, ras)
    want_lab, _ = _canonical(labels, ras)

    out = tmp_path / "ct.lmdb"
    dspipe.build(src, out, progress=False)
    info = dspipe.info(str(out))
    assert info["sample_type"] == "int16", info  # Hounsfield units, not the stored uint16
    recs = _records(out)
    assert len(recs) == want_img.shape[2]
    for k, (img, mask) in enumerate(recs):
        assert img.shape == (1,) + want_img.shape[:2], (k, img.shape)
        np.testing.assert_array_equal(img[0], want_img[:, :, k].astype(np.float32))
        np.testing.assert_array_equal(mask, want_lab[:, :, k])
    vol = _manifest(out)["volumes"]["list"][0]
    assert vol["image"].endswith("images/case1") and vol["label"].endswith("case1.nii.gz")
    np.testing.assert_allclose(np.array(vol["affine"]), want_affine, atol=1e-4)
    assert vol["shape"] == list(want_img.shape)


def test_signed_pixels_rle_compression_and_fractional_rescale(tmp_path):
    import numpy as np

    rng = np.random.default_rng(4)
    signed = rng.integers(-2048, 2048, size=(6, 4, 3)).astype(np.int16)  # 12-bit signed
    src = tmp_path / "t"
    ras = _write_series(src / "images" / "s", signed, AXIAL, (1.0, 1.0, 1.0), (0, 0, 0),
                        signed=True, bits_stored=12, rle=True)
    out = tmp_path / "s.lmdb"
    dspipe.build(src, out, progress=False)
    assert dspipe.info(str(out))["sample_type"] == "int16"
    want, _ = _canonical(signed, ras)
    for k, (img, _mask) in enumerate(_records(out)):
        np.testing.assert_array_equal(img[0], want[:, :, k].astype(np.float32))

    # A fractional slope (PET-like): float32, the rescaled values to float32's precision.
    src2 = tmp_path / "t2"
    pos = rng.integers(0, 30000, size=(5, 5, 4)).astype(np.uint16)
    ras2 = _write_series(src2 / "images" / "p", pos, AXIAL, (2.0, 2.0, 3.0), (1, 2, 3),
                         slope=0.25, inter=-3.5)
    out2 = tmp_path / "p.lmdb"
    dspipe.build(src2, out2, progress=False)
    assert dspipe.info(str(out2))["sample_type"] == "float32"
    want2, _ = _canonical(pos * 0.25 - 3.5, ras2)
    for k, (img, _mask) in enumerate(_records(out2)):
        np.testing.assert_allclose(img[0], want2[:, :, k], rtol=1e-6)


def _ok_series(src, name="case", n=5, **kw):
    import numpy as np

    data = np.random.default_rng(5).integers(0, 1000, size=(4, 4, n)).astype(np.uint16)
    return _write_series(src / "images" / name, data, AXIAL, (1.0, 1.0, 2.0), (0, 0, 0), **kw)


def test_bad_series_are_refused_naming_the_folder_and_files(tmp_path):
    import pydicom as pd

    def fails(src, *needles):
        with pytest.raises(dspipe.CorruptRecord) as e:
            dspipe.build(src, tmp_path / f"out-{src.name}", progress=False)
        for n in needles:
            assert n in str(e.value), str(e.value)
        return str(e.value)

    # A missing slice: the gap is named by the files on either side of it.
    src = tmp_path / "gap"
    _ok_series(src)
    files = sorted((src / "images" / "case").iterdir(),
                   key=lambda f: pd.dcmread(f).ImagePositionPatient[2])
    files[2].unlink()
    fails(src, str(src / "images" / "case"), "not evenly spaced", files[1].name, files[3].name)

    # A duplicate position (the same slice twice under another name).
    src = tmp_path / "dup"
    _ok_series(src)
    one = sorted((src / "images" / "case").iterdir())[0]
    ds = pd.dcmread(one)
    ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = "1.2.3.4.5"
    ds.save_as(str(one.with_name("zz_copy.dcm")))
    fails(src, "at the same position", "zz_copy.dcm", one.name)

    # Mixed sizes and orientations.
    src = tmp_path / "size"
    _ok_series(src)
    f = sorted((src / "images" / "case").iterdir())[1]
    ds = pd.dcmread(f)
    ds.Rows, ds.Columns = 2, 8
    ds.save_as(str(f))
    fails(src, "differ in size", f.name)
    src = tmp_path / "orient"
    _ok_series(src)
    f = sorted((src / "images" / "case").iterdir())[1]
    ds = pd.dcmread(f)
    ds.ImageOrientationPatient = [0, 1, 0, 0, 0, -1]
    ds.save_as(str(f))
    fails(src, "differ in orientation", f.name)

    # Two series in one folder.
    src = tmp_path / "two"
    _ok_series(src)
    f = sorted((src / "images" / "case").iterdir())[1]
    ds = pd.dcmread(f)
    ds.SeriesInstanceUID = "9.9.9"
    ds.save_as(str(f))
    fails(src, "holds 2 series", "'9.9.9'", "own folder")

    # A file that is not DICOM, a truncated one, and DICOM files loose in images/.
    src = tmp_path / "junk"
    _ok_series(src)
    (src / "images" / "case" / "notes.txt").write_text("not an image")
    fails(src, "notes.txt")
    src = tmp_path / "trunc"
    _ok_series(src)
    f = sorted((src / "images" / "case").iterdir())[1]
    f.write_bytes(f.read_bytes()[:-20])
    fails(src, f.name)
    src = tmp_path / "loose"
    _ok_series(src)
    for f in (src / "images" / "case").iterdir():
        shutil.move(str(f), str(src / "images" / f.name))
    (src / "images" / "case").rmdir()
    fails(src, "a DICOM file among 2D images", "images/<case>/*.dcm")


def test_a_bad_series_is_skipped_and_the_others_built_when_asked(tmp_path):
    src = tmp_path / "mixed"
    _ok_series(src, "a")
    _ok_series(src, "b", n=4)
    f = sorted((src / "images" / "b").iterdir())[0]
    f.write_bytes(b"garbage")
    r = dspipe.build(src, tmp_path / "out", on_error="skip", progress=False)
    assert r["records"] == 5 and r["skipped"] == 1, r
