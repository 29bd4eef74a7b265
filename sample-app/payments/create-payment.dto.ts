import {
  IsISO4217CurrencyCode,
  IsInt,
  IsNotEmpty,
  IsString,
  Max,
  MaxLength,
  Min,
} from 'class-validator';

export class CreatePaymentDto {
  /** In cents; at most what the `integer` column holds. */
  @IsInt()
  @Min(1)
  @Max(2_147_483_647)
  amount!: number;

  @IsISO4217CurrencyCode()
  currency!: string;

  @IsString()
  @IsNotEmpty()
  @MaxLength(64)
  merchantId!: string;
}
